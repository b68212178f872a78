"""`make run` keeps a secrets key beside the log it starts, and only then."""

from __future__ import annotations

import stat
from pathlib import Path

from cryptography.fernet import Fernet

from o_devtools.dev_secrets import KEY_FILE, with_key


def test_an_embedded_log_gets_one_key_kept_in_its_data_folder(tmp_path: Path) -> None:
    first = with_key({}, tmp_path)["O_SECRETS_KEY"]
    Fernet(first.encode())  # a usable key
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    # The next start opens what the first one encrypted.
    assert with_key({}, tmp_path)["O_SECRETS_KEY"] == first


def test_a_given_key_or_an_external_log_is_left_alone(tmp_path: Path) -> None:
    assert with_key({"O_SECRETS_KEY": "k"}, tmp_path) == {"O_SECRETS_KEY": "k"}
    assert with_key({"NATS_URL": "nats://x:4222"}, tmp_path) == {"NATS_URL": "nats://x:4222"}
    assert not (tmp_path / KEY_FILE).exists()
