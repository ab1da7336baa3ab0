"""Sealers of secrets at rest (`scheduler.core.ports.SecretSealer`): envelope encryption with AES-256-GCM.

`KmsSealer` (on AWS): each seal asks KMS for a fresh data key (GenerateDataKey, bound to the job by the encryption
context), encrypts locally and stores the data key as KMS encrypted it; opening asks KMS to decrypt the data key
(cached per process, so a worker that runs a job often asks once). `LocalSealer` (local mode, in-memory tests, and
a deployment without a KMS key): one key derived from a settings secret. A sealed value names its scheme, so each
sealer refuses the other's values with SealFailed rather than garbage.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from scheduler.core.ports import SealFailed

_NONCE_BYTES = 12


def _aad(context: Mapping[str, str]) -> bytes:
    return json.dumps(dict(context), sort_keys=True, separators=(",", ":")).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _encrypt(key: bytes, plaintext: bytes, context: Mapping[str, str]) -> tuple[bytes, bytes]:
    nonce = os.urandom(_NONCE_BYTES)
    return nonce, AESGCM(key).encrypt(nonce, plaintext, _aad(context))


def _decrypt(key: bytes, nonce: bytes, ciphertext: bytes, context: Mapping[str, str]) -> bytes:
    try:
        return AESGCM(key).decrypt(nonce, ciphertext, _aad(context))
    except (InvalidTag, ValueError) as exc:  # ValueError: a nonce of the wrong length
        raise SealFailed("the sealed value does not open (tampered with, another job's, or another key's)") from exc


def _parts(sealed: str, scheme: str, count: int) -> list[bytes]:
    parts = sealed.split(".")
    if len(parts) != count + 1 or parts[0] != scheme:
        raise SealFailed(f"not a value sealed by {scheme}")
    try:
        return [_unb64(part) for part in parts[1:]]
    except ValueError as exc:
        raise SealFailed(f"a malformed {scheme} sealed value") from exc


class LocalSealer:
    """AES-256-GCM under one key derived from `secret` (`local1.<nonce>.<ciphertext>`)."""

    SCHEME = "local1"

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(b"punctual header sealing\x00" + secret.encode()).digest()

    def seal(self, plaintext: bytes, context: Mapping[str, str]) -> str:
        nonce, ciphertext = _encrypt(self._key, plaintext, context)
        return ".".join((self.SCHEME, _b64(nonce), _b64(ciphertext)))

    def open(self, sealed: str, context: Mapping[str, str]) -> bytes:
        nonce, ciphertext = _parts(sealed, self.SCHEME, 2)
        return _decrypt(self._key, nonce, ciphertext, context)


class KmsSealer:
    """Envelope encryption under the KMS key `key_id` (`kms1.<encrypted data key>.<nonce>.<ciphertext>`). The client
    is injected (a boto3 KMS client); KMS errors (a key disabled, a denied grant) are raised as they are, so that a
    call is retried rather than judged."""

    SCHEME = "kms1"
    #: Data keys kept in clear in this process, by their encrypted form.
    CACHE_SIZE = 256

    def __init__(self, key_id: str, client: Any) -> None:
        self.key_id = key_id
        self.client = client
        self._keys: OrderedDict[bytes, bytes] = OrderedDict()

    def seal(self, plaintext: bytes, context: Mapping[str, str]) -> str:
        data_key = self.client.generate_data_key(KeyId=self.key_id, KeySpec="AES_256", EncryptionContext=dict(context))
        nonce, ciphertext = _encrypt(data_key["Plaintext"], plaintext, context)
        return ".".join((self.SCHEME, _b64(data_key["CiphertextBlob"]), _b64(nonce), _b64(ciphertext)))

    def open(self, sealed: str, context: Mapping[str, str]) -> bytes:
        wrapped, nonce, ciphertext = _parts(sealed, self.SCHEME, 3)
        cache_key = wrapped + _aad(context)
        key = self._keys.get(cache_key)
        if key is None:
            try:
                key = self.client.decrypt(CiphertextBlob=wrapped, EncryptionContext=dict(context), KeyId=self.key_id)[
                    "Plaintext"
                ]
            except Exception as exc:
                if type(exc).__name__ in {"InvalidCiphertextException", "IncorrectKeyException"} or (
                    getattr(exc, "response", {}).get("Error", {}).get("Code")
                    in {"InvalidCiphertextException", "IncorrectKeyException"}
                ):
                    raise SealFailed("KMS does not open the sealed value's data key (another job's or key's)") from exc
                raise
            assert isinstance(key, bytes)
            self._keys[cache_key] = key
            while len(self._keys) > self.CACHE_SIZE:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(cache_key)
        return _decrypt(key, nonce, ciphertext, context)
