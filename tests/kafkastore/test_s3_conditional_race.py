"""The tests' S3 (moto on loopback) decides racing conditional PUTs as S3 does: one wins.

kafkastore's commit point is a put-if-absent of version N+1; the fault harness once saw moto
answer 200 to two brokers racing for one manifest version (both checked "absent", then both
stored), and the loser went on to plan N+2 on a version that was not the one stored. This
test makes that race happen on purpose: the first PUT is held inside moto's store step until
a second PUT of the same key arrives there (or a few seconds pass)."""
from __future__ import annotations

import threading

import boto3
import botocore.exceptions
import pytest

from moto.s3.models import S3Backend


@pytest.fixture
def held_first_put(monkeypatch):
    """moto's store step holds the first put of key ``race`` until a second one reaches it."""
    arrived = threading.Event()
    calls = []
    original = S3Backend.put_object

    def put_object(self, bucket_name, key_name, *args, **kwargs):
        if key_name == "race":
            calls.append(key_name)
            if len(calls) == 1:
                arrived.wait(3.0)   # a second put can get here only if the check is not atomic
            else:
                arrived.set()
        return original(self, bucket_name, key_name, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", put_object)
    return calls


def test_of_two_racing_put_if_absent_requests_exactly_one_wins(s3_endpoint, held_first_put):
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="conditional-race")
    answers = []

    def put(body: bytes) -> None:
        try:
            client.put_object(Bucket="conditional-race", Key="race", Body=body, IfNoneMatch="*")
            answers.append((body, 200))
        except botocore.exceptions.ClientError as exc:
            answers.append((body, exc.response["ResponseMetadata"]["HTTPStatusCode"]))

    first = threading.Thread(target=put, args=(b"first",))
    first.start()
    while not held_first_put:     # the first put is inside moto's store step
        threading.Event().wait(0.01)
    second = threading.Thread(target=put, args=(b"second",))
    second.start()
    first.join(30)
    second.join(30)
    stored = client.get_object(Bucket="conditional-race", Key="race")["Body"].read()
    assert sorted(status for _, status in answers) == [200, 412]
    assert [body for body, status in answers if status == 200] == [stored]
