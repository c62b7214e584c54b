"""Package discovery for setuptools (metadata lives in pyproject.toml).

The site's templates and static assets sit in the top-level ``site/`` folder, as the
project layout fixes; mapping it to ``fewtrans_board.site_files`` ships it inside the wheel
so an installed package can build a site too. Folders that hold only data (weights,
templates, static assets) are listed as packages as well: setuptools would otherwise warn,
on every install, that it sees importable folders missing from the configuration.
"""

from setuptools import find_packages, setup

DATA_PACKAGES = [
    "fewtrans_board.default_plugins.weights",
    "fewtrans_board.reproduce.targets",
    "fewtrans_board.reproduce.targets.bscd",
    "fewtrans_board.reproduce.targets.fewtrans",
    "fewtrans_board.reproduce.targets.inductive_clip",
    "fewtrans_board.site_files",
    "fewtrans_board.site_files.static",
    "fewtrans_board.site_files.templates",
]

setup(
    packages=[*find_packages(include=["fewtrans_board", "fewtrans_board.*"]), *DATA_PACKAGES],
    package_dir={"fewtrans_board.site_files": "site"},
)
