"""nginx as a load-run target: Debian's nginx, one worker, a keep-alive pool to the upstream.

It answers how far a Python gateway stands from a C proxy doing the same hop. Started with a
config and prefix of its own in the run's folder; CPU time is the master's and the worker's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testkit.ports import wait_for_port

from .procs import cpu_seconds, stop_process

CONFIG = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream app {{
        server {upstream};
        keepalive 1024;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096{tls};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


# TLS terminated by nginx, as the gateway does with listen.tls: TLS 1.2 and 1.3, its
# default ciphers, HTTP/1.1.
TLS = """ ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3"""


def find_nginx() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.access(p, os.X_OK)), None
    )


class Nginx:
    """The same interface as `procs.Child`: url, cpu(), stop(), process."""

    def __init__(
        self,
        binary: str,
        name: str,
        port: int,
        upstream_url: str,
        workdir: Path,
        tls: tuple[str, str] | None = None,
    ):
        """`tls`: a certificate and its key (PEM files): HTTPS to the clients."""
        self.name = name
        self.port = port
        self.admin_url: str | None = None
        self.scheme = "http" if tls is None else "https"
        folder = workdir / name
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "nginx.conf"
        upstream = upstream_url.removeprefix("http://")
        listen_tls = "" if tls is None else TLS.format(cert=tls[0], key=tls[1])
        config.write_text(CONFIG.format(dir=folder, upstream=upstream, port=port, tls=listen_tls))
        self.log = folder / "error.log"
        self.process = subprocess.Popen(
            [binary, "-p", str(folder), "-c", str(config)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for_port(port, self.process)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def _pids(self) -> list[int]:
        """The master and its workers."""
        pids = [self.process.pid]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(stat[1]) == self.process.pid:
                    pids.append(int(entry.name))
        return pids

    def cpu(self) -> float:
        total = 0.0
        for pid in self._pids():
            try:
                total += cpu_seconds(pid)
            except OSError:
                continue
        return total

    def stop(self) -> None:
        stop_process(self.process)  # SIGTERM: nginx's fast shutdown
