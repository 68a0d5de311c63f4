"""Webhook certificates made for one local cluster (openssl): a CA and a serving certificate for ``127.0.0.1``.

Controllers run as local processes serve their webhooks on ``https://127.0.0.1:<port>``; the API server trusts
them through the ``caBundle`` of their webhook configurations, which is this CA. Kueue takes EC P-256 keys; the
training-operator's cert-controller reads its CA key as PKCS#1 RSA only (``x509.ParsePKCS1PrivateKey``) and
checks both certificates against names of its own (``extra_names``, ``ca_name``), hence the options.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from .processes import child_env


def make_certificates(
    cert_dir: Path,
    *,
    ca_name: str = "airflow-mpi kueue webhook CA",
    extra_names: Sequence[str] = (),
    rsa: bool = False,
) -> bytes:
    """A CA and a serving certificate for ``127.0.0.1`` (plus ``extra_names``) in ``cert_dir`` (``ca.crt``,
    ``ca.key``, ``tls.crt``, ``tls.key``). The CA also carries ``ca_name`` as a DNS name (what cert-controller
    verifies a CA against). ``rsa``: RSA 2048 keys in PKCS#1 form instead of EC P-256.

    Returns the CA certificate (PEM), the ``caBundle`` of the webhooks."""
    cert_dir.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=cert_dir, check=True, capture_output=True, env=child_env())

    if rsa:
        new_key: tuple[str, ...] = ("-newkey", "rsa:2048", "-nodes")
    else:
        new_key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ca_ext = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
    if " " not in ca_name:
        ca_ext += f"subjectAltName=DNS:{ca_name}\n"
    (cert_dir / "ca.cnf").write_text(
        "[req]\ndistinguished_name=dn\nx509_extensions=v3_ca\n[dn]\n[v3_ca]\n" + ca_ext
    )
    openssl("req", "-x509", *new_key, "-config", "ca.cnf", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "3650", "-subj", f"/CN={ca_name}")  # fmt: skip
    openssl("req", *new_key, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1")
    names = ",".join(["IP:127.0.0.1", "DNS:localhost", *(f"DNS:{n}" for n in extra_names)])
    (cert_dir / "ext.cnf").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        f"subjectAltName={names}\n"
    )
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "tls.crt", "-days", "3650", "-extfile", "ext.cnf")  # fmt: skip
    if rsa:
        for key in ("ca.key", "tls.key"):
            openssl("rsa", "-in", key, "-traditional", "-out", key)
    for name in ("tls.csr", "ext.cnf", "ca.cnf", "ca.srl"):
        (cert_dir / name).unlink(missing_ok=True)
    (cert_dir / "ca.key").chmod(0o600)
    (cert_dir / "tls.key").chmod(0o600)
    return (cert_dir / "ca.crt").read_bytes()
