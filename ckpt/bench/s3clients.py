"""Compare the two candidate S3 clients, obstore and boto3, against a local SeaweedFS.

``python3 -m ckpt.bench.s3clients [--mib 256] [--repeat 3]`` starts a server on free
loopback ports, runs each measurement ``--repeat`` times per client and prints medians:
parallel multipart PUT of one large object, small (1 MiB) object PUTs and GETs from 8 threads
(64 MiB in all),
a whole-object GET, a 4 KiB range GET, conditional create, and the time a fresh
interpreter takes to import the client and build one (ckpt imports it lazily).  Its
figures chose the client of :mod:`ckpt.storage.s3`.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ckpt.bench import seaweed

MIB = 1 << 20
PART = 8 * MIB
THREADS = 8
SMALL_COUNT = 64
BUCKET = "ckpt-clientbench"


class Obstore:
    name = "obstore"

    def __init__(self, server: seaweed.SeaweedServer) -> None:
        from obstore.store import S3Store

        self.store = S3Store(
            BUCKET,
            endpoint=server.endpoint,
            access_key_id=server.access_key,
            secret_access_key=server.secret_key,
            region="us-east-1",
            client_options={"allow_http": True},
        )

    def put_large(self, key: str, data: bytes, streams: int) -> None:
        import obstore

        obstore.put(self.store, key, io.BytesIO(data), chunk_size=PART, max_concurrency=streams)

    def put(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self.store, key, data, use_multipart=False)

    def create(self, key: str, data: bytes) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store, key, data, mode="create", use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def get(self, key: str) -> bytes:
        import obstore

        return obstore.get(self.store, key).bytes().to_bytes()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        import obstore

        return obstore.get_range(self.store, key, start=start, length=length).to_bytes()


class Boto3:
    name = "boto3"

    def __init__(self, server: seaweed.SeaweedServer) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.client = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
            region_name="us-east-1",
            config=Config(max_pool_connections=2 * THREADS),
        )
        self.transfer = TransferConfig
        self.client.head_bucket(Bucket=BUCKET)

    def put_large(self, key: str, data: bytes, streams: int) -> None:
        config = self.transfer(
            multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=streams
        )
        self.client.upload_fileobj(io.BytesIO(data), BUCKET, key, Config=config)

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=data)

    def create(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=BUCKET, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "PreconditionFailed":
                return False
            raise
        return True

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        rng = f"bytes={start}-{start + length - 1}"
        return self.client.get_object(Bucket=BUCKET, Key=key, Range=rng)["Body"].read()


IMPORTS = {
    "obstore": "import obstore; from obstore.store import S3Store; "
    "S3Store('b', endpoint='http://127.0.0.1:1', access_key_id='a', "
    "secret_access_key='s', region='us-east-1', client_options={'allow_http': True})",
    "boto3": "import boto3; boto3.client('s3', endpoint_url='http://127.0.0.1:1', "
    "aws_access_key_id='a', aws_secret_access_key='s', region_name='us-east-1')",
}


def import_seconds(name: str) -> float:
    """Wall time of a fresh interpreter that imports the client and builds one, minus a
    bare interpreter's."""

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        return time.perf_counter() - start

    bare = statistics.median(run("pass") for _ in range(5))
    return statistics.median(run(IMPORTS[name]) for _ in range(5)) - bare


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_round(
    client: Any, rep: int, large: bytes, small: list[bytes], pool: ThreadPoolExecutor
) -> dict[str, float]:
    """Every throughput and latency figure once."""
    key = f"{client.name}/large-{rep}"
    keys = [f"{client.name}/small-{rep}-{i}" for i in range(len(small))]
    mib = len(large) / MIB
    out = {
        "put 1 stream MB/s": mib / timed(lambda: client.put_large(key, large, 1)),
        "put 8 streams MB/s": mib / timed(lambda: client.put_large(key, large, THREADS)),
        "get whole MB/s": mib / timed(lambda: client.get(key)),
        "small puts x8 MB/s": SMALL_COUNT / timed(lambda: list(pool.map(client.put, keys, small))),
        "small gets x8 MB/s": SMALL_COUNT / timed(lambda: list(pool.map(client.get, keys))),
    }
    starts = [12345 * i for i in range(1, 41)]
    lat = [timed(lambda s=s: client.get_range(key, s, 4096)) for s in starts]
    out["4 KiB range get ms"] = statistics.median(lat) * 1000
    return out


def measure(client: Any, mib: int, repeat: int, small_kib: int = 1024) -> dict[str, float]:
    """Medians over ``repeat`` rounds, and whether a conditional create is refused."""
    large = os.urandom(mib * MIB)
    small = [os.urandom(small_kib << 10) for _ in range(SMALL_COUNT * 1024 // small_kib)]
    with ThreadPoolExecutor(THREADS) as pool:
        rounds = [one_round(client, rep, large, small, pool) for rep in range(repeat)]
    result = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    ckey = f"{client.name}/create"
    first, second = client.create(ckey, b"a"), client.create(ckey, b"b")
    result["create refused when present"] = float(first and not second and client.get(ckey) == b"a")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--small-kib", type=int, default=1024, help="size of the small objects")
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, float]] = {}
    with seaweed.start(buckets=(BUCKET,)) as server:
        for cls in (Obstore, Boto3):
            rows[cls.name] = measure(cls(server), args.mib, args.repeat, args.small_kib)
    for name in IMPORTS:
        rows[name]["import + client ms"] = import_seconds(name) * 1000
    names = list(rows["obstore"])
    print(f"{'median of ' + str(args.repeat):<30} {'obstore':>10} {'boto3':>10}")
    for name in names:
        print(f"{name:<30} {rows['obstore'][name]:>10.1f} {rows['boto3'][name]:>10.1f}")


if __name__ == "__main__":
    main()
