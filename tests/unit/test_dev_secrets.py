"""`make run` keeps a secrets key beside the log it starts, and only then."""

from __future__ import annotations

import stat
from pathlib import Path

from cryptography.fernet import Fernet

from o_devtools.dev_secrets import CALLBACK_SECRET_FILE, KEY_FILE, with_key


def test_an_embedded_log_gets_one_key_kept_in_its_data_folder(tmp_path: Path) -> None:
    first = with_key({}, tmp_path)["O_SECRETS_KEY"]
    Fernet(first.encode())  # a usable key
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    # The next start opens what the first one encrypted.
    assert with_key({}, tmp_path)["O_SECRETS_KEY"] == first


def test_an_embedded_log_gets_one_callback_secret_kept_in_its_data_folder(
    tmp_path: Path,
) -> None:
    first = with_key({}, tmp_path)["O_CALLBACK_SECRET"]
    assert len(first) >= 32
    assert stat.S_IMODE((tmp_path / CALLBACK_SECRET_FILE).stat().st_mode) == 0o600
    # Receivers keep checking signatures across restarts.
    assert with_key({}, tmp_path)["O_CALLBACK_SECRET"] == first


def test_a_given_key_or_an_external_log_is_left_alone(tmp_path: Path) -> None:
    given = {"O_SECRETS_KEY": "k", "O_CALLBACK_SECRET": "a-secret-of-my-own"}
    assert with_key(given, tmp_path) == given
    assert with_key({"NATS_URL": "nats://x:4222"}, tmp_path) == {"NATS_URL": "nats://x:4222"}
    assert not (tmp_path / KEY_FILE).exists()
    assert not (tmp_path / CALLBACK_SECRET_FILE).exists()


def test_a_given_key_still_gets_a_callback_secret(tmp_path: Path) -> None:
    env = with_key({"O_SECRETS_KEY": "k"}, tmp_path)
    assert env["O_SECRETS_KEY"] == "k"
    assert env["O_CALLBACK_SECRET"] == (tmp_path / CALLBACK_SECRET_FILE).read_text().strip()
    assert not (tmp_path / KEY_FILE).exists()
