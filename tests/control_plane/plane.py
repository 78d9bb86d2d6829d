"""A real Kubernetes control plane on loopback for the tests: etcd, kube-apiserver (secure port,
RBAC, service-account token signing, admission webhooks, DRA), kube-controller-manager,
kube-scheduler and KWOK as the kubelet stand-in. Does I/O: starts and stops processes.

The binaries come from `controlplane/build.sh` (built from the Go module proxy, cached by version).
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.issue import Issued, issue_ca, issue_serving
from gpu_balancer.local_prometheus import free_port
from tests.polling import wait_until

REPOSITORY = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPOSITORY / "controlplane" / "build.sh"
READY_TIMEOUT_S = 120.0


class ControlPlaneUnavailable(RuntimeError):
    """The binaries could not be built here (no Go toolchain, or the module proxy refused)."""


def build_binaries() -> Path:
    """The cached bin directory, building it first when missing (minutes cold, at once warm)."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ControlPlaneUnavailable(f"controlplane/build.sh exited {result.returncode}: "
                                      f"{result.stderr.strip()[-2000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> None:
    """In the child before exec: the kernel kills it when the thread that started it dies, so a
    pytest killed by a signal (SIGKILL included, where no teardown runs) leaves no process behind."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn_tied(argv: list[str], log: Path, **options) -> subprocess.Popen:
    """Start `argv` with its output appended to `log`, in a session of its own (so a stop can
    signal its whole group), and tied to this process's life."""
    with open(log, "ab") as output:
        return subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                **options)


def _can_bind(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def issue_client(ca: Issued, user: str, groups: tuple[str, ...] = ()) -> Issued:
    """A client certificate the API server reads as `user` in `groups` (CN and O)."""
    now = datetime.now(timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    certificate = (
        x509.CertificateBuilder().subject_name(x509.Name(subject)).issuer_name(ca.certificate.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(certificate, key)


def write_kubeconfig(path: Path, server: str, ca_file: Path, *, user: dict) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    return path


@dataclass
class ControlPlane:
    """Processes of one control plane under `workdir`; `start()` brings them up in order."""

    bin: Path
    workdir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    # --- set-up -------------------------------------------------------------------------------

    def _write_pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = issue_ca("gpu-balancer-test-cluster-ca")
        serving = issue_serving(ca, ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
                                ip_addresses=(ipaddress.ip_address("127.0.0.1"),))
        (pki / "ca.crt").write_bytes(ca.certificate_pem)
        (pki / "apiserver.crt").write_bytes(serving.certificate_pem)
        (pki / "apiserver.key").write_bytes(serving.key_pem)
        # The token signing key is RSA: what kube-apiserver's --service-account-key-file expects most widely.
        accounts = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (pki / "sa.key").write_bytes(accounts.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (pki / "sa.pub").write_bytes(accounts.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        for name, user, groups in (("admin", "test-admin", ("system:masters",)),
                                   ("controller-manager", "system:kube-controller-manager", ()),
                                   ("scheduler", "system:kube-scheduler", ()),
                                   ("kwok", "kwok", ("system:masters",))):
            client = issue_client(ca, user, groups)
            (pki / f"{name}.crt").write_bytes(client.certificate_pem)
            (pki / f"{name}.key").write_bytes(client.key_pem)

    def _kubeconfig(self, name: str) -> Path:
        pki = self.workdir / "pki"
        path = self.admin_kubeconfig if name == "admin" else self.workdir / f"{name}.kubeconfig"
        return write_kubeconfig(path, self.server, self.ca_file, user={
            "client-certificate": str(pki / f"{name}.crt"), "client-key": str(pki / f"{name}.key")})

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.processes[name] = spawn_tied(argv, self.workdir / f"{name}.log", start_new_session=True)

    def _etcd(self) -> None:
        client, peer = self.ports["etcd"], self.ports["etcd-peer"]
        self._spawn("etcd", [
            str(self.bin / "etcd"), "--name", "test", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer}",
            # A test's data need not survive a power cut; fsync on this disk costs seconds.
            "--unsafe-no-fsync", "--log-level", "warn",
        ])

    def _apiserver(self) -> None:
        pki = self.workdir / "pki"
        self._spawn("apiserver", [
            str(self.bin / "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address", "127.0.0.1", "--secure-port", str(self.ports["apiserver"]),
            "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki / "sa.pub"),
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--authorization-mode", "RBAC",
            "--enable-admission-plugins", "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ServiceAccount",
            "--runtime-config", "resource.k8s.io/v1=true",
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--allow-privileged=true",
        ])

    def _controllers(self) -> None:
        pki = self.workdir / "pki"
        kubeconfig = str(self._kubeconfig("controller-manager"))
        self._spawn("controller-manager", [
            str(self.bin / "kube-controller-manager"), "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", "127.0.0.1", "--secure-port", str(self.ports["controller-manager"]),
            "--leader-elect=false", "--use-service-account-credentials=true",
            "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
            "--cluster-signing-cert-file", str(pki / "ca.crt"),
            # No cloud, no node IPAM: KWOK's nodes carry their own addresses. No metrics API either:
            # an HPA's status is written by the test that needs one, as its controller would.
            "--controllers", "*,-nodeipam,-horizontalpodautoscaling",
        ])
        kubeconfig = str(self._kubeconfig("scheduler"))
        self._spawn("scheduler", [
            str(self.bin / "kube-scheduler"), "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", "127.0.0.1", "--secure-port", str(self.ports["scheduler"]),
            "--leader-elect=false",
        ])
        self._spawn("kwok", [
            str(self.bin / "kwok"), "--kubeconfig", str(self._kubeconfig("kwok")),
            "--config", str(self.bin / "kwok-stages.yaml"),
            "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
            "--cidr", "10.0.0.0/16", "--node-ip", "10.0.0.1", "--node-lease-duration-seconds", "40",
            "--server-address", f"127.0.0.1:{self.ports['kwok']}",
        ])

    def start(self) -> ControlPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok"):
            self.ports[name] = free_port()
        self._write_pki()
        self._kubeconfig("admin")
        self._etcd()
        self._apiserver()
        self.wait_ready()
        self._controllers()
        self._wait_for_default_account("default")
        return self

    # --- use ----------------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        pki = self.workdir / "pki"
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return context

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.server}/readyz", context=self._ssl_context(), timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def _alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited {process.returncode}: {self.log_tail(name)}")

    def wait_for(self, condition, what: str, timeout: float = READY_TIMEOUT_S):
        """`wait_until`, failing at once if a process of the control plane exits meanwhile."""
        return wait_until(condition, what, timeout, alive=self._alive, interval=0.25,
                          detail=lambda: f"; apiserver log: {self.log_tail('apiserver')}")

    def wait_ready(self) -> None:
        self.wait_for(self.ready, "kube-apiserver /readyz")

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run([str(self.bin / "kubectl"), "--kubeconfig", str(kubeconfig or self.admin_kubeconfig),
                                 *args], input=input, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, objects: list[dict] | dict) -> None:
        items = objects if isinstance(objects, list) else [objects]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    def _wait_for_default_account(self, namespace: str) -> None:
        # The controller manager makes it; the ServiceAccount admission plugin refuses pods before it.
        self.wait_for(lambda: self.kubectl("get", "serviceaccount", "default", "-n", namespace,
                                           check=False).returncode == 0, f"the default ServiceAccount of {namespace}")

    def create_namespaces(self, *names: str, labels: dict | None = None) -> None:
        """Namespaces (with `labels`), ready for pods: their `default` ServiceAccount exists."""
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
                    for name in names])
        for name in names:
            self._wait_for_default_account(name)

    def _etcd_call(self, method: str, body: dict) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.ports['etcd']}/v3/{method}",
                                         data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read())

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (through etcd's JSON gateway, as
        `etcdctl compact` does), so any watch from an older resourceVersion is answered 410 Gone.
        Returns the revision compacted to."""
        revision = int(self._etcd_call("maintenance/status", {})["header"]["revision"])
        self._etcd_call("kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig that acts as ServiceAccount `namespace/name` with a token the API server
        signed (TokenRequest), so our RBAC, and only it, decides what it may do."""
        token = self.kubectl("create", "token", name, "-n", namespace, "--duration", "2h").stdout.strip()
        return write_kubeconfig(path, self.server, self.ca_file, user={"token": token})

    def restart_apiserver(self) -> None:
        self._stop("apiserver")
        # Kubeconfigs name this port: wait out any process that probed it meanwhile (free_port).
        wait_until(lambda: _can_bind(self.ports["apiserver"]), "the API server's port free again", 30, interval=0.25)
        self._apiserver()
        self.wait_ready()

    def _stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def stop(self) -> None:
        for name in ("kwok", "scheduler", "controller-manager", "apiserver", "etcd"):
            self._stop(name)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
