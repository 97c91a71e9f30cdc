"""Maps the top-level folders onto one import namespace, ``zoo``.

core/ -> zoo.core, plugins/ -> zoo.plugins, transports/ -> zoo.transports, zoo/ -> zoo.
Every sub-package below those folders is found automatically, so adding a plugin
package needs no change here.
"""
from setuptools import find_packages, setup

ROOTS = {"zoo": "zoo", "zoo.core": "core", "zoo.plugins": "plugins", "zoo.transports": "transports"}

packages, package_dir = [], {}
for prefix, folder in ROOTS.items():
    package_dir[prefix] = folder
    packages.append(prefix)
    packages += [f"{prefix}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
