#!/usr/bin/env bash
# Set up one peer RL library in its own virtual environment OUTSIDE the repository, with
# pinned versions (never a dependency of Zoo):
#
#   bash benchmarks/peers/setup.sh cleanrl          # CleanRL's ppo_atari.py, ppo.py and dqn.py
#   bash benchmarks/peers/setup.sh cleanrl-mujoco   # CleanRL's ppo/sac_continuous_action.py on MuJoCo v4 envs
#   bash benchmarks/peers/setup.sh sample-factory   # Sample Factory 2.1.1
#   bash benchmarks/peers/setup.sh rllib            # Ray RLlib 2.60.0
#
# Where: $ZOO_PEERS_DIR (default ~/.cache/zoo-peers)/<peer>/venv. torch is the same CPU build
# as Zoo's (torch==2.13.0; pip's find-links or the PyTorch CPU index supply it). Idempotent:
# a peer whose venv already has its marker file (installed.txt) is left alone.
#
# CleanRL is a set of single-file scripts, not a package on the index: its sources come from
# the git repository $CLEANRL_GIT (default: the public repository) at the pinned commit below,
# exported (git archive) into <peers>/cleanrl/src.
set -euo pipefail

PEER=${1:?usage: setup.sh cleanrl|cleanrl-mujoco|sample-factory|rllib}
SOURCES=()  # CleanRL's files of the peer (CleanRL only)
ROOT=${ZOO_PEERS_DIR:-$HOME/.cache/zoo-peers}
PY=${PYTHON:-python3}
TORCH="torch==2.13.0"
CLEANRL_COMMIT=fe8d8a03c41a7ef5b523e2e354bd01c363e786bb
CLEANRL_GIT=${CLEANRL_GIT:-https://github.com/vwxyzjn/cleanrl}

case "$PEER" in
  cleanrl)
    # Same env stack as Zoo (gymnasium 1.x, ale-py 0.12.1 with its ROMs); run_peer.py maps the
    # two wrapper names CleanRL's script uses that gymnasium 1.0 renamed.
    PKGS=("$TORCH" "numpy>=2,<3" "gymnasium[classic-control]==1.4.0" "ale-py==0.12.1"
          "opencv-python-headless>=4.8,<5" "tyro==1.0.16" "tensorboard==2.21.0")
    SOURCES=(cleanrl/ppo.py cleanrl/ppo_atari.py cleanrl/dqn.py cleanrl/dqn_atari.py cleanrl_utils/__init__.py
             cleanrl_utils/atari_wrappers.py cleanrl_utils/buffers.py) ;;
  cleanrl-mujoco)
    # ppo_continuous_action.py and sac_continuous_action.py (with CleanRL's own replay buffer) on
    # the v4 MuJoCo envs of CleanRL's published results, with the gymnasium they were written for
    # (0.29.1, which needs numpy < 2): no compatibility shim.
    PKGS=("$TORCH" "gymnasium[mujoco]==0.29.1" "mujoco==4.0.1" "numpy<2" "tyro==1.0.16" "tensorboard==2.21.0")
    SOURCES=(cleanrl/ppo_continuous_action.py cleanrl/sac_continuous_action.py cleanrl_utils/__init__.py
             cleanrl_utils/buffers.py) ;;
  sample-factory)
    # Sample Factory 2.1.1 needs gymnasium < 1.0 and numpy < 2; ale-py 0.9.1 ships the ROMs.
    PKGS=("$TORCH" "sample-factory==2.1.1" "gymnasium==0.29.1" "ale-py==0.9.1" "numpy<2"
          "opencv-python-headless>=4.8,<5") ;;
  rllib)
    # ray[rllib] 2.60.0 pins gymnasium 1.2.2; ale-py 0.12.1 as Zoo.
    PKGS=("$TORCH" "ray[rllib]==2.60.0" "gymnasium[classic-control]==1.2.2" "ale-py==0.12.1"
          "opencv-python-headless>=4.8,<5") ;;
  *) echo "setup.sh: unknown peer '$PEER'; use cleanrl, cleanrl-mujoco, sample-factory or rllib" >&2; exit 2 ;;
esac

DIR="$ROOT/$PEER"
export_sources() {  # CleanRL's scripts at the pinned commit, exported into <peers>/<peer>/src
  rm -rf "$DIR/src" && mkdir -p "$DIR/src"
  if [[ -d "$CLEANRL_GIT/objects" || -d "$CLEANRL_GIT/.git" ]]; then
    git --git-dir="$( [[ -d $CLEANRL_GIT/.git ]] && echo "$CLEANRL_GIT/.git" || echo "$CLEANRL_GIT")" \
      archive "$CLEANRL_COMMIT" "${SOURCES[@]}" | tar -x -C "$DIR/src"
  else
    rm -rf "$DIR/clone"
    git clone -q "$CLEANRL_GIT" "$DIR/clone" && git -C "$DIR/clone" checkout -q "$CLEANRL_COMMIT"
    (cd "$DIR/clone" && git archive "$CLEANRL_COMMIT" "${SOURCES[@]}") | tar -x -C "$DIR/src"
    rm -rf "$DIR/clone"
  fi
}
if [[ -f "$DIR/installed.txt" ]]; then
  MISSING=()
  for f in "${SOURCES[@]}"; do [[ -f "$DIR/src/$f" ]] || MISSING+=("$f"); done
  if (( ${#MISSING[@]} == 0 )); then
    echo "$PEER: already set up in $DIR"; exit 0
  fi
  # set up by an older setup.sh with fewer scripts: export the sources again, packages as they are
  echo "$PEER: set up without ${MISSING[*]}: exporting CleanRL's sources again"
  export_sources
  echo "$PEER: set up in $DIR"; exit 0
fi
mkdir -p "$DIR"
"$PY" -m venv "$DIR/venv"
"$DIR/venv/bin/pip" install -q --upgrade pip
"$DIR/venv/bin/pip" install -q "${PKGS[@]}"
if (( ${#SOURCES[@]} )); then
  export_sources
  echo "cleanrl commit $CLEANRL_COMMIT" >> "$DIR/installed.txt.tmp"
fi
if [[ "$PEER" == sample-factory ]]; then
  # Sample Factory's Atari example makes "PongNoFrameskip-v4" without importing ale_py, which is
  # what registers the ALE ids on gymnasium 0.29: import it at start-up in this venv only
  # (every process Sample Factory starts, spawned or forked, then has the ids).
  SITE=$("$DIR/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import ale_py" > "$SITE/zoo_peers_register_ale.pth"
fi
"$DIR/venv/bin/pip" freeze >> "$DIR/installed.txt.tmp"
mv "$DIR/installed.txt.tmp" "$DIR/installed.txt"
echo "$PEER: set up in $DIR"
