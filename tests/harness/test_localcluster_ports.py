"""localcluster/ports.py: clusters started at once on one machine never get the same component port."""

from __future__ import annotations

import json
import socket
import time

from localcluster import ports


def test_claims_in_a_row_never_hand_out_a_port_twice_and_each_was_free(tmp_path):
    claims = tmp_path / "ports.json"
    first, second = ports.claim(6, claims), ports.claim(6, claims)
    assert len(set(first) | set(second)) == 12
    assert all(ports.LOW <= p <= ports.HIGH for p in first + second)
    assert set(json.loads(claims.read_text())) == {str(p) for p in first + second}


def test_a_port_in_use_is_skipped_and_an_old_claim_expires(tmp_path, monkeypatch):
    claims = tmp_path / "ports.json"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        picks = iter([taken, 20001, 20002])
        monkeypatch.setattr(ports.random, "randint", lambda low, high: next(picks))
        claims.write_text(json.dumps({"20002": time.time() - ports.CLAIM_SECONDS - 1}))
        assert ports.claim(2, claims) == [20001, 20002]
