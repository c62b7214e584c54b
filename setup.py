"""Package discovery for setuptools (metadata lives in pyproject.toml).

The site's templates and static assets sit in the top-level ``site/`` folder, as the
project layout fixes; mapping it to ``fewtrans_board.site_files`` ships it inside the wheel
so an installed package can build a site too.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["fewtrans_board", "fewtrans_board.*"]), "fewtrans_board.site_files"],
    package_dir={"fewtrans_board.site_files": "site"},
)
