"""A real ``litellm`` proxy process from the documented files (``examples/litellm/``), for the integration tests.

`documented_config` is ``examples/litellm/config.yaml`` with only its deployments
pointed at a loopback `providers.ProviderServer` at a small window; `start_proxy`
runs ``litellm --config`` on it with ``agentcontext_hook.py`` beside it, waits
until it answers, and stops it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from providers import ProviderServer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "litellm"
MASTER_KEY = "sk-" + "5e" * 32


@dataclass
class Proxy:
    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def post(self, path: str, body: dict[str, Any], **headers: str) -> dict[str, Any]:
        response = httpx.post(
            self.url + path,
            json=body,
            headers={"authorization": f"Bearer {MASTER_KEY}", **headers},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def stream(self, path: str, body: dict[str, Any]) -> list[str]:
        with httpx.stream(
            "POST",
            self.url + path,
            json={**body, "stream": True},
            headers={"authorization": f"Bearer {MASTER_KEY}"},
            timeout=60,
        ) as response:
            assert response.status_code == 200, response.read()
            return [line for line in response.iter_lines() if line]

    def log_lines(self, needle: str) -> list[str]:
        return [line for line in self.log.read_text(errors="replace").splitlines() if needle in line]


def documented_config(upstream: ProviderServer, window: int) -> dict[str, Any]:
    """examples/litellm/config.yaml with its deployments pointed at the loopback provider, at ``window``."""
    config = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
    for deployment in config["model_list"]:
        params = deployment["litellm_params"]
        params["api_base"] = upstream.openai_url if params["model"].startswith("openai/") else upstream.root
        deployment["model_info"]["max_input_tokens"] = window
    return dict(config)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def start_proxy(config: dict[str, Any], directory: Path, hook: str | None = None) -> Iterator[Proxy]:
    """A litellm proxy process running ``config`` with examples/litellm's hook file (or ``hook``), in ``directory``."""
    with start_proxies([(config, directory)], hooks=[hook]) as (proxy,):
        yield proxy


@contextlib.contextmanager
def start_proxies(
    setups: list[tuple[dict[str, Any], Path]], hooks: list[str | None] | None = None
) -> Iterator[tuple[Proxy, ...]]:
    """Proxy processes for ``(config, directory)`` pairs, started side by side (each takes seconds to start).

    ``hooks`` gives each its ``agentcontext_hook.py`` source (None: examples/litellm's).
    """
    launched: list[Proxy] = []
    try:
        for (config, directory), hook in zip(setups, hooks or [None] * len(setups), strict=True):
            launched.append(_launch(config, directory, hook))
        for proxy in launched:
            _wait_until_up(proxy)
        yield tuple(launched)
    finally:
        for proxy in launched:
            proxy.process.terminate()
        for proxy in launched:
            try:
                proxy.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proxy.process.kill()
                proxy.process.wait()


def _launch(config: dict[str, Any], directory: Path, hook: str | None = None) -> Proxy:
    directory.mkdir(parents=True, exist_ok=True)
    if hook is None:
        shutil.copy(EXAMPLE / "agentcontext_hook.py", directory / "agentcontext_hook.py")
    else:
        (directory / "agentcontext_hook.py").write_text(hook)
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL", "AGENTCONTEXT_SESSIONS")
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]),
        LITELLM_MASTER_KEY=MASTER_KEY,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_TELEMETRY="False",
        ANTHROPIC_API_KEY="test",
        OPENAI_API_KEY="test",
    )
    log = directory / "proxy.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", "config.yaml", "--port", str(port)],
            cwd=directory,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    return Proxy(url=f"http://127.0.0.1:{port}", log=log, process=process)


def _wait_until_up(proxy: Proxy) -> None:
    deadline = time.monotonic() + 120
    while True:  # wait until it answers (or died)
        assert proxy.process.poll() is None, proxy.log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "the proxy did not start in 120 s"
        try:
            if httpx.get(proxy.url + "/health/liveliness", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
