"""`s3://bucket/prefix`: blobs as objects of an S3-compatible store, via aiobotocore.

Bodies up to one `part_size` are sent with one PutObject; bigger ones with a multipart
upload, one part buffered at a time, completed on `commit`. An object exists only once the
upload completes, so a record never points at a half-written blob. Objects of records that
expire are removed by a bucket lifecycle rule (see the README); those whose record was never
stored are deleted at once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from gateway.blobs.base import READ_CHUNK, BlobReader, BlobStore, BlobWriter, check_name, new_name
from gateway.config.settings import BlobSettings
from gateway.errors import BlobError, ConfigError

log = logging.getLogger(__name__)

_FAILURES = (ClientError, BotoCoreError, aiohttp.ClientError, OSError, TimeoutError)
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NoSuchBucket", "NotFound"})


def _code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


class S3BlobWriter(BlobWriter):
    def __init__(self, client: Any, bucket: str, key: str, name: str, part_size: int) -> None:
        self._client = client
        self._bucket = bucket
        self._key = key
        self._name = name
        self._part_size = part_size
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    async def write(self, chunk: bytes) -> None:
        self._buffer += chunk
        if len(self._buffer) >= self._part_size:
            await self._upload_part()

    async def _upload_part(self) -> None:
        data = bytes(self._buffer)
        self._buffer.clear()
        where = dict(Bucket=self._bucket, Key=self._key)
        try:
            if self._upload_id is None:
                started = await self._client.create_multipart_upload(**where)
                self._upload_id = started["UploadId"]
            number = len(self._parts) + 1
            sent = await self._client.upload_part(
                **where, UploadId=self._upload_id, PartNumber=number, Body=data
            )
        except _FAILURES as exc:
            raise BlobError(BlobError.WRITE, f"s3://{self._bucket}/{self._key}: {exc}") from exc
        self._parts.append({"PartNumber": number, "ETag": sent["ETag"]})

    async def commit(self) -> str:
        where = dict(Bucket=self._bucket, Key=self._key)
        try:
            if self._upload_id is None:
                await self._client.put_object(**where, Body=bytes(self._buffer))
                self._buffer.clear()
            else:
                if self._buffer:
                    await self._upload_part()
                await self._client.complete_multipart_upload(
                    **where, UploadId=self._upload_id, MultipartUpload={"Parts": self._parts}
                )
        except BlobError:
            await self.abort()
            raise
        except _FAILURES as exc:
            await self.abort()
            raise BlobError(BlobError.WRITE, f"s3://{self._bucket}/{self._key}: {exc}") from exc
        return self._name

    async def abort(self) -> None:
        self._buffer.clear()
        upload_id, self._upload_id = self._upload_id, None
        if upload_id is None:
            return
        try:
            await self._client.abort_multipart_upload(
                Bucket=self._bucket, Key=self._key, UploadId=upload_id
            )
        except _FAILURES as exc:
            # The lifecycle rule's AbortIncompleteMultipartUpload removes it later.
            log.warning("could not abort upload of s3://%s/%s: %s", self._bucket, self._key, exc)


class S3BlobReader(BlobReader):
    def __init__(self, body: Any, size: int) -> None:
        self._body = body
        self.size = size

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._body.iter_chunks(READ_CHUNK):
                yield chunk
        except _FAILURES as exc:
            raise BlobError(BlobError.UNAVAILABLE, f"reading the object failed: {exc}") from exc

    async def close(self) -> None:
        self._body.close()


class S3BlobStore(BlobStore):
    def __init__(self, settings: BlobSettings) -> None:
        parts = urlsplit(settings.url)
        self.bucket = parts.netloc
        prefix = parts.path.strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self.settings = settings
        self._stack = AsyncExitStack()
        self._client: Any = None

    def key(self, name: str) -> str:
        return self.prefix + check_name(name)

    async def start(self) -> None:
        s = self.settings
        config = AioConfig(
            signature_version="s3v4",
            s3={"addressing_style": s.addressing},
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=30,
        )
        self._client = await self._stack.enter_async_context(
            get_session().create_client(
                "s3",
                endpoint_url=s.endpoint,
                region_name=s.region,
                aws_access_key_id=s.access_key_id,
                aws_secret_access_key=s.secret_access_key,
                aws_session_token=s.session_token,
                config=config,
            )
        )
        where = f" at {s.endpoint}" if s.endpoint else ""
        try:
            await self._client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            await self.close()
            if _code(exc) in _NOT_FOUND:
                detail = f"bucket {self.bucket!r} does not exist{where}"
                raise ConfigError(f"blob.url: {detail}") from None
            raise ConfigError(
                f"blob.url: bucket {self.bucket!r}{where} is not usable: {exc}"
            ) from None
        except _FAILURES as exc:
            await self.close()
            raise ConfigError(f"blob.url: cannot reach S3{where}: {exc}") from None

    async def writer(self) -> BlobWriter:
        name = new_name()
        return S3BlobWriter(
            self._client, self.bucket, self.key(name), name, self.settings.part_size
        )

    async def reader(self, name: str) -> BlobReader:
        key = self.key(name)
        try:
            got = await self._client.get_object(Bucket=self.bucket, Key=key)
        except _FAILURES as exc:
            code = _code(exc)
            reason = BlobError.MISSING if code in _NOT_FOUND else BlobError.UNAVAILABLE
            raise BlobError(reason, f"s3://{self.bucket}/{key}: {exc}") from exc
        return S3BlobReader(got["Body"], int(got["ContentLength"]))

    async def delete(self, name: str) -> None:
        try:
            await self._client.delete_object(Bucket=self.bucket, Key=self.key(name))
        except _FAILURES as exc:
            log.warning("could not delete s3://%s/%s: %s", self.bucket, self.key(name), exc)

    async def close(self) -> None:
        await self._stack.aclose()
