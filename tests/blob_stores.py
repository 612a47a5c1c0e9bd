"""Looking inside the blob store a test gateway writes to: a directory or an S3 bucket."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from .s3 import MotoServer


class FileBlobs:
    kind = "file"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.config: dict[str, Any] = {"url": f"file://{directory}"}

    def names(self) -> list[str]:
        if not self.directory.exists():
            return []
        return sorted(p.name for p in self.directory.iterdir() if not p.name.endswith(".part"))

    def unfinished(self) -> list[str]:
        if not self.directory.exists():
            return []
        return sorted(p.name for p in self.directory.iterdir() if p.name.endswith(".part"))

    def read(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()

    def replace(self, name: str, data: bytes) -> None:
        (self.directory / name).write_bytes(data)

    def remove(self, name: str) -> None:
        (self.directory / name).unlink()

    def break_store(self) -> None:
        """Make every later write fail."""
        self.directory.rmdir()

    def close(self) -> None:
        return None


class S3Blobs:
    kind = "s3"

    def __init__(self, server: MotoServer) -> None:
        self.bucket = f"t-{uuid.uuid4().hex[:16]}"
        self.prefix = "bodies/"
        self.s3 = server.s3()
        self.s3.create_bucket(Bucket=self.bucket)
        self.config = server.blob_config(self.bucket, self.prefix.rstrip("/"))
        self.broken = False

    def names(self) -> list[str]:
        listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix)
        return sorted(o["Key"].removeprefix(self.prefix) for o in listed.get("Contents", []))

    def unfinished(self) -> list[str]:
        listed = self.s3.list_multipart_uploads(Bucket=self.bucket)
        return [u["Key"] for u in listed.get("Uploads", [])]

    def read(self, name: str) -> bytes:
        return self.s3.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read()

    def replace(self, name: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data)

    def remove(self, name: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self.prefix + name)

    def break_store(self) -> None:
        """Make every later write fail."""
        self.s3.delete_bucket(Bucket=self.bucket)
        self.broken = True

    def close(self) -> None:
        """Empty and drop the bucket, so the server does not keep test bodies."""
        if self.broken:
            self.s3.close()
            return
        for upload in self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []):
            self.s3.abort_multipart_upload(
                Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
            )
        for name in self.names():
            self.remove(name)
        self.s3.delete_bucket(Bucket=self.bucket)
        self.s3.close()


StoredBlobs = FileBlobs | S3Blobs
