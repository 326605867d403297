"""Packaging for dptoolkit: every setting comes from settings.ini (nbdev 2 layout)."""
from configparser import ConfigParser
import shlex
import setuptools

cfg = ConfigParser(delimiters=["="])
cfg.read("settings.ini", encoding="utf-8")
cfg = cfg["DEFAULT"]

licenses = {"apache2": ("Apache Software License 2.0", "OSI Approved :: Apache Software License")}
lic = licenses[cfg["license"]]
reqs = shlex.split(cfg.get("requirements", ""))
sim_reqs = shlex.split(cfg.get("sim_requirements", ""))
convert_reqs = shlex.split(cfg.get("convert_requirements", ""))
language_reqs = shlex.split(cfg.get("language_requirements", ""))
codecs_reqs = shlex.split(cfg.get("codecs_requirements", ""))
serve_reqs = shlex.split(cfg.get("serve_requirements", ""))
# the tests run those chapters too; the simulators (`sim`) are installed one at a time by tools/setup.sh, so that one
# without wheels for an interpreter (gym-aloha's labmaze on Python 3.13) costs only its own chapters and tests
dev_reqs = shlex.split(cfg.get("dev_requirements", "")) + convert_reqs + language_reqs + codecs_reqs + serve_reqs
scripts = [s for s in cfg.get("console_scripts", "").split() if s]

setuptools.setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    license=lic[0],
    classifiers=["Programming Language :: Python :: 3", "License :: " + lic[1],
                 "Topic :: Scientific/Engineering :: Artificial Intelligence"],
    description=cfg["description"],
    author=cfg["author"],
    author_email=cfg["author_email"],
    keywords=cfg["keywords"],
    packages=setuptools.find_packages(include=["dptoolkit", "dptoolkit.*"]),
    include_package_data=True,
    package_data={"dptoolkit": ["configs/*.yaml"]},
    install_requires=reqs,
    extras_require={"dev": dev_reqs, "sim": sim_reqs, "convert": convert_reqs, "language": language_reqs,
                    "codecs": codecs_reqs, "serve": serve_reqs},
    python_requires=">=" + cfg["min_python"],
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    zip_safe=False,
    entry_points={"console_scripts": scripts, "nbdev": [f"{cfg['lib_name']}={cfg['lib_name']}._modidx:d"]},
)
