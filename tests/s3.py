"""An S3-compatible server for tests: moto's server mode in a child process on loopback,
with request signatures (SigV4) checked against an IAM user's keys."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from typing import Any

import boto3
import orjson
from botocore.config import Config

from testkit.ports import Port, wait_for_port

REGION = "us-east-1"
ALLOW_S3 = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


class MotoServer:
    """`python -m moto.server` on a port this process holds (it binds it beside the hold,
    `testkit.ports`); `start` returns once it answers and signed requests are enforced,
    with `access_key_id`/`secret_access_key` the keys it accepts."""

    def __init__(self) -> None:
        self.held = Port()
        self.port = self.held.number
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.access_key_id = ""
        self.secret_access_key = ""

    def start(self) -> MotoServer:
        env = {**os.environ, "AWS_DEFAULT_REGION": REGION, "MOTO_PORT": str(self.port)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            env=env,
        )  # fmt: skip
        wait_for_port(self.port, self.process, 30.0)
        iam = self._client("iam", "anonymous", "anonymous")
        iam.create_user(UserName="gateway")
        iam.put_user_policy(
            UserName="gateway", PolicyName="s3", PolicyDocument=orjson.dumps(ALLOW_S3).decode()
        )
        key = iam.create_access_key(UserName="gateway")["AccessKey"]
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        # From here on every request must carry a valid signature by a known key.
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
        return self

    def _client(self, service: str, key_id: str, secret: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def s3(self) -> Any:
        """A synchronous S3 client with the accepted keys, for setting up and inspecting."""
        return self._client("s3", self.access_key_id, self.secret_access_key)

    def blob_config(self, bucket: str, prefix: str = "bodies") -> dict[str, Any]:
        """The gateway's `blob:` section for `bucket` on this server."""
        return {
            "url": f"s3://{bucket}/{prefix}",
            "endpoint": self.endpoint,
            "region": REGION,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "addressing": "path",
            "part_size": "5MiB",
        }

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.held.close()
