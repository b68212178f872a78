"""Tool secrets are ciphertext outside the sandbox; without the key nothing is stored."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from o_runtime.tool_secrets import KEY_ENV, SecretsUnavailable, decrypt_all, encrypt_all


def test_round_trip_and_no_plaintext(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, Fernet.generate_key().decode())
    encrypted = encrypt_all({"API_TOKEN": "tok-123"})
    assert "tok-123" not in encrypted["API_TOKEN"]
    assert decrypt_all(encrypted) == {"API_TOKEN": "tok-123"}


def test_without_a_key_secrets_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(SecretsUnavailable, match=KEY_ENV):
        encrypt_all({"A": "b"})
    assert encrypt_all({}) == {}


def test_another_key_does_not_decrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, Fernet.generate_key().decode())
    encrypted = encrypt_all({"A": "b"})
    monkeypatch.setenv(KEY_ENV, Fernet.generate_key().decode())
    with pytest.raises(SecretsUnavailable, match="rotated"):
        decrypt_all(encrypted)
