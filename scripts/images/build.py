"""Builds the mlbench images (Dockerfile.master, Dockerfile.worker) and says in words what
to fix when a build cannot work: no engine, a base image that cannot be pulled, a package
index that cannot be reached, a certificate refused.

Behind a proxy with its own CA, or with pip's packages in local folders, the build gets
pip's configuration and the CA bundle as BuildKit secrets: mounted for the install step
only, never in a layer. Local folders in that configuration (file:// indexes, find-links)
are served to the build over HTTP on 127.0.0.1 for as long as it runs (builds use the host
network), since a build sees no file of the host.

Standard library only: it runs before any virtualenv exists. `make images` calls it;
`python3 scripts/images/build.py --help` lists the options.
"""

from __future__ import annotations

import argparse
import configparser
import http.server
import os
import posixpath
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[2]
LOCAL_BASE = "mlbench/debian-python:3.11-bookworm"
HUB_BASE = "python:3.11-slim-bookworm"
# pip settings that decide where packages come from; anything else is left out.
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "timeout", "retries")


class BuildError(Exception):
    """A build that cannot work, with what to do about it."""


def version() -> str:
    """The images' tag: the package version of setup.py ('+' is not allowed in a tag)."""
    match = re.search(r'version="([^"]+)"', (ROOT / "setup.py").read_text())
    if not match:
        raise BuildError("setup.py names no version=")
    return match.group(1).replace("+", "-")


def builder() -> list[str]:
    """The command that builds with BuildKit: `docker buildx build --load` where the buildx
    plugin is there, else a docker client that has BuildKit built in (before 23.0, e.g.
    Debian's docker.io), else nothing can build the Dockerfiles' RUN --mount."""
    clients = [os.environ.get("MLBENCH_DOCKER_CLI", ""), "docker", "/usr/bin/docker"]
    for client in dict.fromkeys(c for c in clients if c):
        try:
            if subprocess.run([client, "buildx", "version"], capture_output=True).returncode == 0:
                return [client, "buildx", "build", "--load"]
            out = subprocess.run(
                [client, "version", "--format", "{{.Client.Version}}"],
                capture_output=True,
                text=True,
            ).stdout
        except OSError:
            continue
        major = re.match(r"(\d+)\.", out.strip())
        if major and int(major.group(1)) < 23:
            return [client, "build"]
    raise BuildError(
        "no docker client can build with BuildKit: install the buildx plugin "
        "(docker-buildx-plugin) or Debian's docker.io client"
    )


def check_engine(client: str) -> None:
    result = subprocess.run(
        [client, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True
    )
    if result.returncode != 0:
        where = os.environ.get("DOCKER_HOST", "the default socket /var/run/docker.sock")
        raise BuildError(
            f"no Docker engine answers at {where}: start one (as root, "
            "`scripts/images/engine.sh start` starts a private one; then "
            "export DOCKER_HOST=unix:///run/mlbench-docker/docker.sock) or set DOCKER_HOST "
            "to a running engine"
        )


def host_pip_settings() -> dict[str, str]:
    """pip's own configuration on this machine (files and PIP_* variables), as `pip config
    list` shows it: the last word for each key wins, as in pip."""
    for command in ([sys.executable, "-m", "pip"], ["pip3"], ["pip"]):
        try:
            out = subprocess.run(
                [*command, "config", "list"], capture_output=True, text=True, check=True
            ).stdout
            break
        except (OSError, subprocess.CalledProcessError):
            continue
    else:
        raise BuildError("--pip-conf host needs pip on this machine to read its configuration")
    settings: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        settings[name] = value.strip().strip("'\"")
    return settings


def file_pip_settings(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser()
    parser.read(path)
    settings: dict[str, str] = {}
    for section in ("global", "install"):
        if parser.has_section(section):
            settings.update(parser.items(section))
    return settings


class LocalFolders:
    """Serves local folders named in pip's settings over HTTP on 127.0.0.1 during a build."""

    def __init__(self) -> None:
        self.roots: dict[str, Path] = {}
        self.server: http.server.ThreadingHTTPServer | None = None

    def url(self, location: str) -> str:
        """An http:// URL for a file:// URL or path; other URLs stay as they are. An index
        (…/simple) is served with its parent, whose files it links relatively."""
        if "://" in location and not location.startswith("file:"):
            return location
        path = Path(unquote(urlparse(location).path) if "://" in location else location)
        if not path.exists():
            raise BuildError(f"pip's configuration names {location}, which does not exist")
        served, rest = (path.parent, path.name) if path.name == "simple" else (path, "")
        prefix = f"f{len(self.roots)}"
        self.roots[prefix] = served
        self._start()
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/{prefix}/{rest}".rstrip("/") + "/"

    def _start(self) -> None:
        if self.server is not None:
            return
        roots = self.roots

        class Handler(http.server.SimpleHTTPRequestHandler):
            def translate_path(self, path: str) -> str:
                prefix, _, rest = unquote(urlparse(path).path).lstrip("/").partition("/")
                rest = posixpath.normpath(rest or ".")
                root = roots.get(prefix)
                if root is None or rest.startswith(".."):
                    return "/nonexistent"
                return str(root / rest)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def pip_secrets(
    source: str, ca: str, folders: LocalFolders, workdir: Path
) -> tuple[list[str], Path | None, str]:
    """--secret arguments for pip's configuration and the CA bundle, the configuration
    written for the build (None: pip's defaults) and the CA bundle ("" none)."""
    args: list[str] = []
    settings: dict[str, str] = {}
    if source == "host":
        settings = host_pip_settings()
    elif source:
        settings = file_pip_settings(Path(source))
    ca = ca or (settings.get("cert", "") if source == "host" else "")
    if ca:
        if not Path(ca).is_file():
            raise BuildError(f"the CA bundle {ca} does not exist")
        args += ["--secret", f"id=ca,src={ca}"]
    if settings:
        lines = ["[global]"]
        for key in PIP_KEYS:
            if key in settings:
                value = settings[key]
                if key in ("index-url", "extra-index-url", "find-links"):
                    value = " ".join(folders.url(v) for v in value.split())
                lines.append(f"{key} = {value}")
        conf = workdir / "pip.conf"
        conf.write_text("\n".join(lines) + "\n")
        args += ["--secret", f"id=pipconf,src={conf}"]
        return args, conf, ca
    return args, None, ca


def public_bundle() -> str | None:
    """A CA bundle like a base image's own (Mozilla's, as certifi ships it): the host's
    system store may hold a proxy's CA that no image does."""
    for module in ("certifi", "pip._vendor.certifi"):
        try:
            return __import__(module, fromlist=["where"]).where()
        except ImportError:
            continue
    return None


def check_index(url: str, ca: str) -> None:
    """Ask `url` for pip's own project page as the build's pip will (same network: builds
    use the host's), so an index that cannot work is named before any build step runs."""
    if not url.startswith("https://") and not url.startswith("http://"):
        return
    bundle = ca or public_bundle()
    context = ssl.create_default_context(cafile=bundle) if bundle else None
    try:
        urllib.request.urlopen(url.rstrip("/") + "/pip/", timeout=20, context=context).close()
    except urllib.error.HTTPError:
        return  # it answers (a 404 is an index without pip, which pip copes with)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ssl.SSLCertVerificationError):
            raise BuildError(
                f"the package index {url} presents a certificate pip will refuse "
                f"({reason.verify_message}): a proxy or index with its own CA is in the way; "
                "give its CA bundle: make images CA_BUNDLE=/path/ca.pem (or PIP_CONF=host, "
                "which takes pip's own cert setting)"
            ) from error
        raise BuildError(
            f"the package index {url} cannot be reached ({reason}): the build reaches only "
            "the indexes of the pip configuration it is given: make images PIP_CONF=host "
            "(this machine's pip configuration) or PIP_CONF=/path/pip.conf"
        ) from error


def indexes(conf: Path | None, torch_index: str | None, components: list[str]) -> list[str]:
    """The indexes the build's pip will ask: its configuration's, and torch's CPU index."""
    settings = file_pip_settings(conf) if conf else {}
    urls = [settings.get("index-url", "https://pypi.org/simple")]
    urls += settings.get("extra-index-url", "").split()
    if "worker" in components and torch_index != "":
        urls.append(torch_index or "https://download.pytorch.org/whl/cpu")
    return urls


# What a failed build's log says -> what to do. The first match wins.
DIAGNOSES = [
    (
        r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLError",
        "pip's certificate check failed: a proxy or index with its own CA is in the way; "
        "give its CA bundle: make images CA_BUNDLE=/path/ca.pem (or PIP_CONF=host, which "
        "takes pip's own cert setting)",
    ),
    (
        r"Could not find a version that satisfies|No matching distribution found|"
        r"ResolutionImpossible|"
        r"Max retries exceeded|Failed to establish a new connection|"
        r"Temporary failure in name resolution|Network is unreachable",
        "pip could not get the packages it needs from its index (unreachable, or without "
        "them): the build reaches only the indexes in "
        "the pip configuration it is given: make images PIP_CONF=host (this machine's pip "
        "configuration) or PIP_CONF=/path/pip.conf",
    ),
    (
        r"failed to (?:solve|resolve|load metadata)[^\n]*(?:docker\.io|library/|registry|"
        r"manifest)|pull access denied|failed to do request|dial tcp|i/o timeout|"
        r"not found: manifest unknown|no such host",
        "a base image cannot be pulled (no access to its registry): make images BASE=local "
        "builds a Debian base with debootstrap on this machine (root), and ASSETS=context "
        "takes the dashboard's libraries from node_modules instead of a node image",
    ),
]


def diagnose(log: str) -> str:
    for pattern, advice in DIAGNOSES:
        if re.search(pattern, log):
            return advice
    return "the engine's log above says why"


def build_one(command: list[str], component: str, args: argparse.Namespace) -> None:
    tags = [f"{args.registry}mlbench_{component}:{t}" for t in (args.tag, "latest")]
    argv = [*command, "--network", "host", "--progress", "plain", "-f", f"Dockerfile.{component}"]
    for tag in dict.fromkeys(tags):
        argv += ["-t", tag]
    base_arg = "PYTHON_IMAGE" if component == "master" else "BASE_IMAGE"
    argv += ["--build-arg", f"{base_arg}={args.base_image}"]
    if component == "master":
        argv += ["--build-arg", f"ASSETS={args.assets}"]
    else:
        argv += ["--build-arg", f"DEVICE={args.device}"]
        if args.torch_index is not None:
            argv += ["--build-arg", f"TORCH_CPU_INDEX={args.torch_index}"]
    # A proxy of this machine's environment; Docker keeps these out of the image's history.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        if os.environ.get(name):
            argv += ["--build-arg", f"{name}={os.environ[name]}"]
    if args.no_cache:
        argv.append("--no-cache")
    argv += [*args.secrets, str(ROOT)]
    print(f"== building {', '.join(tags)}", file=sys.stderr, flush=True)
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    log = []
    for line in proc.stdout:
        log.append(line)
        if not args.quiet:
            sys.stderr.write(line)
    if proc.wait() != 0:
        tail = "".join(log[-25:])
        raise BuildError(
            f"building mlbench_{component} failed: {diagnose(''.join(log))}\n"
            f"-- the end of the build's log:\n{tail}"
        )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("components", nargs="*", default=["master", "worker"])
    parser.add_argument(
        "--base",
        default="hub",
        help=f"hub ({HUB_BASE}), local (a Debian base made here: {LOCAL_BASE}) or an image",
    )
    parser.add_argument("--assets", choices=["npm", "context"], default=None)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--registry", default="", help="prefix of the tags, e.g. gcr.io/p")
    parser.add_argument("--tag", default=None, help="default: the package version")
    parser.add_argument("--pip-conf", default="", help="host, or a pip.conf to build with")
    parser.add_argument("--ca", default="", help="a CA bundle for pip (a build secret)")
    parser.add_argument("--torch-index", default=None, help="the CPU torch index ('' none)")
    parser.add_argument(
        "--no-cache", action="store_true", help="run every step (the cache ignores secrets)"
    )
    parser.add_argument("--quiet", action="store_true", help="print the log only on failure")
    args = parser.parse_args(argv)
    for component in args.components:
        if component not in ("master", "worker"):
            parser.error(f"component must be master or worker, not {component}")
    if args.registry and not args.registry.endswith("/"):
        args.registry += "/"
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    folders = LocalFolders()
    try:
        args.tag = args.tag or version()
        command = builder()
        check_engine(command[0])
        if args.base == "local":
            subprocess.run(
                ["bash", str(ROOT / "scripts/images/debian-base.sh"), LOCAL_BASE],
                check=True,
                stdout=sys.stderr,
            )
        args.base_image = {"hub": HUB_BASE, "local": LOCAL_BASE}.get(args.base, args.base)
        args.assets = args.assets or ("context" if args.base == "local" else "npm")
        if args.assets == "context" and not (ROOT / "node_modules" / "uplot").is_dir():
            raise BuildError(
                "ASSETS=context takes node_modules from the checkout: run make install"
            )
        with tempfile.TemporaryDirectory() as workdir:
            args.secrets, conf, ca = pip_secrets(args.pip_conf, args.ca, folders, Path(workdir))
            if conf is not None and args.torch_index is None:
                args.torch_index = ""  # pip's configuration says where torch comes from
            for url in indexes(conf, args.torch_index, args.components):
                check_index(url, ca)
            for component in dict.fromkeys(args.components):
                build_one(command, component, args)
    except subprocess.CalledProcessError:
        print("the local Debian base could not be made (see above)", file=sys.stderr)
        return 1
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        folders.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
