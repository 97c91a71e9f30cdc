"""RLlib's PPO at a workload of ``zoo bench``, printing one JSON line of progress per iteration.

Runs inside RLlib's own virtual environment (``setup.sh rllib``), never in Zoo's:

    <peers>/rllib/venv/bin/python rllib_run.py --env-id PongNoFrameskip-v4 --num-envs 8 --num-steps 128 \\
        --epochs 4 --minibatch-size 256

The workload: ``--num-envs`` envs over 2 env runners (processes), ``--num-steps`` steps each
per iteration (RLlib's ``rollout_fragment_length``), a train batch of num-envs x num-steps,
``--epochs`` epochs of minibatches of ``--minibatch-size``; Atari through RLlib's own
``wrap_atari_for_new_api_stack`` (84 x 84 grey, 4 frames, frame-skip 4) with a Nature CNN
(RLlib's default filters for 84 x 84), CleanRL's PPO hyperparameters; no sampling timeout (RLlib's default 60 s returns empty
iterations on a heavily loaded machine). Each iteration prints
``{"env_steps": N, "trained_env_steps": N}`` with N the lifetime env steps sampled, every one
of which an iteration of synchronous PPO trains on (RLlib's ``num_env_steps_trained_lifetime``
counts each epoch's and minibatch's pass, about 18x that at 4 x 4 on CartPole); Ctrl-C or
SIGTERM ends the run and shuts the local Ray instance down.
"""
import argparse
import json
import os
import signal
import sys


def find(tree, key):
    """The first value under ``key`` anywhere in the nested result dict ``tree`` (depth first), or None."""
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        for value in tree.values():
            got = find(value, key)
            if got is not None:
                return got
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", required=True)
    parser.add_argument("--num-envs", type=int, required=True)
    parser.add_argument("--num-steps", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--minibatch-size", type=int, required=True)
    args = parser.parse_args()
    os.environ.pop("RAY_ADDRESS", None)  # a local Ray instance of its own, never a running cluster

    import gymnasium as gym
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.tune.registry import register_env

    atari = "NoFrameskip" in args.env_id
    if atari:
        env_id = args.env_id

        def make_atari(_config):
            # runs in each env runner process, where the ALE ids must be registered again
            import ale_py
            from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

            gym.register_envs(ale_py)
            return wrap_atari_for_new_api_stack(gym.make(env_id), dim=84, framestack=4)

        register_env("bench-env", make_atari)
        env = "bench-env"
    else:
        env = args.env_id
    runners = 2 if args.num_envs % 2 == 0 else 1
    config = (PPOConfig()
              .environment(env, clip_rewards=True if atari else None)
              .env_runners(num_env_runners=runners, num_envs_per_env_runner=args.num_envs // runners,
                           rollout_fragment_length=args.num_steps, sample_timeout_s=3600.0)
              .training(train_batch_size_per_learner=args.num_envs * args.num_steps,
                        minibatch_size=args.minibatch_size, num_epochs=args.epochs, lr=2.5e-4, gamma=0.99,
                        lambda_=0.95, clip_param=0.1 if atari else 0.2, vf_loss_coeff=0.5, entropy_coeff=0.01,
                        grad_clip=0.5))
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        algo = config.build_algo()
        while True:
            result = algo.train()
            sampled = int(find(result, "num_env_steps_sampled_lifetime") or 0)
            # Synchronous PPO: each iteration trains on exactly the env steps it sampled (RLlib's own
            # num_env_steps_trained_lifetime counts every pass of every epoch and minibatch instead).
            print(json.dumps({"env_steps": sampled, "trained_env_steps": sampled}), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        ray.shutdown()
    sys.exit(0)


if __name__ == "__main__":
    main()
