"""Lists the packages of the one ``flowserve`` distribution.

``pyproject.toml`` holds the metadata and maps the top-level folders ``exporter/``,
``server/`` and ``clients/`` to ``flowserve.exporter``, ``flowserve.server`` and
``flowserve.clients``; this file only walks those folders for their subpackages.
"""

from setuptools import find_packages, setup

FOLDERS = {"flowserve": "flowserve", "exporter": "flowserve.exporter",
           "server": "flowserve.server", "clients": "flowserve.clients"}


def _packages():
    names = []
    for folder, package in FOLDERS.items():
        names.append(package)
        names += [f"{package}.{sub}" for sub in find_packages(folder)]
    return names


setup(packages=_packages())
