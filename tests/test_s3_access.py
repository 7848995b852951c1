"""Access rules enforced by a real server: denied writes, refused and revoked credentials.

moto's server checks signatures and IAM policies once ``INITIAL_NO_AUTH_ACTION_COUNT``
unauthenticated actions have been spent (here on making the bucket and two users), so
these are the server's own answers, not translated stand-ins.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from s3_utils import HOST, moto_server

from ipy_resume.store import StoreError, open_store

pytestmark = pytest.mark.slow

BUCKET = "guarded"
URL = f"s3://{BUCKET}/team"
SET_UP_ACTIONS = 7  # create_bucket, then per user: create_user, create_access_key, policy


@dataclass
class Guarded:
    endpoint: str
    keys: dict[str, tuple[str, str]]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    import boto3

    log = tmp_path_factory.mktemp("moto-auth") / "moto.log"
    with moto_server(log, INITIAL_NO_AUTH_ACTION_COUNT=str(SET_UP_ACTIONS)) as server:
        anyone = {
            "endpoint_url": server.endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "set-up",
            "aws_secret_access_key": "set-up",
        }
        assert HOST in server.endpoint
        iam = boto3.client("iam", **anyone)
        boto3.client("s3", **anyone).create_bucket(Bucket=BUCKET)
        keys: dict[str, tuple[str, str]] = {}
        for user, actions in (
            ("writer", ["s3:*", "iam:CreateAccessKey", "iam:DeleteAccessKey"]),
            ("reader", ["s3:GetObject", "s3:ListBucket"]),
        ):
            iam.create_user(UserName=user)
            made = iam.create_access_key(UserName=user)["AccessKey"]
            policy = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
            }
            iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(policy))
            keys[user] = (made["AccessKeyId"], made["SecretAccessKey"])
        yield Guarded(server.endpoint, keys)


def _as(
    monkeypatch: pytest.MonkeyPatch, guarded: Guarded, tmp_path: Path, key: tuple[str, str]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", guarded.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key[1])
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IPY_RESUME_KEY_FILE", str(tmp_path / "team.key"))
    monkeypatch.setenv("IPY_RESUME_CACHE_DIR", str(tmp_path / "cache"))


def _one_line(exc: BaseException, *secrets: str) -> str:
    text = str(exc)
    assert "\n" not in text
    for secret in secrets:
        assert secret not in text
    return text


def test_a_read_only_teammate_restores_and_is_told_why_a_save_fails(
    guarded: Guarded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"a": np.arange(6.0), "o": {"tag": "shared"}}
    _as(monkeypatch, guarded, tmp_path, guarded.keys["writer"])
    saved = open_store(URL).save("train", "k1", values).manifest

    _as(monkeypatch, guarded, tmp_path, guarded.keys["reader"])
    store = open_store(URL)
    found = store.find("train", "k1")
    assert found is not None and found.id == saved.id
    got = store.load_values(found)
    assert np.array_equal(got["a"], values["a"]) and got["o"] == values["o"]

    with pytest.raises(StoreError) as info:
        store.save("train", "k2", {"b": 1})
    text = _one_line(info.value, *guarded.keys["reader"])
    assert f"access to {URL} was denied" in text and "s3:PutObject" in text
    assert "values are still in memory" in text
    assert store.find("train", "k2") is None  # nothing half-written became visible


@pytest.mark.parametrize("case", ["wrong secret", "unknown key", "revoked key"])
def test_refused_credentials_are_one_line_without_secrets(
    guarded: Guarded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    if case == "wrong secret":
        key = (guarded.keys["writer"][0], "a-secret-that-is-not-right")
    elif case == "unknown key":
        key = ("AKIAUNKNOWNKEY000000", "a-secret-for-no-one")
    else:
        # a key made, used, then deleted: what an expired or rotated credential looks like
        _as(monkeypatch, guarded, tmp_path, guarded.keys["writer"])
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=guarded.endpoint,
            region_name="us-east-1",
            aws_access_key_id=guarded.keys["writer"][0],
            aws_secret_access_key=guarded.keys["writer"][1],
        )
        made = iam.create_access_key(UserName="writer")["AccessKey"]
        key = (made["AccessKeyId"], made["SecretAccessKey"])
        _as(monkeypatch, guarded, tmp_path, key)
        open_store(URL).save("rotated", "k", {"x": 1})
        iam.delete_access_key(UserName="writer", AccessKeyId=key[0])
    _as(monkeypatch, guarded, tmp_path, key)
    with pytest.raises(StoreError) as info:
        open_store(URL).find("train", "k1")
    text = _one_line(info.value, key[1])
    assert f"the credentials for {URL} were refused" in text
    assert "AWS_ACCESS_KEY_ID" in text and "run again" in text


CELL = (
    "%%checkpoint shared\n"
    "import numpy as np\n"
    "with open('ran.log', 'a') as fh:\n"
    "    fh.write('ran\\n')\n"
    "w = np.random.rand(50)\n"
    "print('made', w.shape)\n"
)


def test_a_read_only_kernel_restores_a_teammates_checkpoint(
    guarded: Guarded, tmp_path: Path
) -> None:
    from test_cross_process import run_process

    def env(user: str) -> dict[str, str]:
        key_id, secret = guarded.keys[user]
        return {
            "IPY_RESUME_DIR": f"s3://{BUCKET}/kernels",
            "IPY_RESUME_KEY_FILE": str(tmp_path / "team.key"),
            "IPY_RESUME_CACHE_DIR": str(tmp_path / user / "cache"),
            "JUPYTER_DATA_DIR": str(tmp_path / user / "jupyter-data"),
            "AWS_ENDPOINT_URL": guarded.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": key_id,
            "AWS_SECRET_ACCESS_KEY": secret,
        }

    wrote = run_process(tmp_path, [CELL], {"w": "w.tolist()"}, **env("writer"))
    read = run_process(tmp_path, [CELL, CELL], {"w": "w.tolist()"}, **env("reader"))
    assert (tmp_path / "ran.log").read_text() == "ran\n"  # the reader did not execute it
    assert read["eval"] == wrote["eval"]
    for cell in read["cells"]:
        assert cell["error"] is None and "restored 'shared'" in cell["stderr"]
        assert cell["stdout"] == wrote["cells"][0]["stdout"]
    # its own timeline rows cannot be written there: said once, with the first hit, in
    # one line, without the secret
    assert "could not update the timeline" in read["cells"][0]["stderr"]
    stderr = "".join(cell["stderr"] for cell in read["cells"])
    notes = [line for line in stderr.splitlines() if "timeline" in line]
    assert len(notes) == 1 and "denied" in notes[0], stderr
    assert guarded.keys["reader"][1] not in stderr
