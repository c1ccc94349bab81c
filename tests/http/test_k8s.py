"""test_k8s.py: docker/kubernetes/ -- valid objects that agree with the server.

- Every object of the kustomization (its resources, the Secrets its
  secretGenerator makes, the commented queue-depth HPA) passes
  tests/k8s/validate.mjs: the Kubernetes API schemas of the npm package
  kubernetes-models, and no field the API does not know; and the validator
  does fail on a wrong type, a misspelt field and an unknown kind.
- Where kubectl exists, `kubectl kustomize` renders the directory (with
  throwaway secret files) and its output validates too; the generated
  Secrets' hashed names are the ones the Deployment mounts.
- The manifests agree with each other and with the image: selectors and
  labels, the named port behind probes, Service and scrape annotation, the
  numeric user of docker/Dockerfile, the security settings, the grace
  period against the drain, CPU against --threads.
- And with the server: every ConfigMap key is the variable of a real flag;
  a server started with exactly that environment (the Secret files made
  here at the mounted paths' names) serves HTTPS on the manifest's port,
  answers every probe path 200 without the API key (kubelet sends none) and
  /metrics for the scraper, requires the key elsewhere, passes
  --healthcheck with the same environment, and drains within the grace
  period.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_k8s.py
"""

import http.client
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import time

import yaml

import run

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KDIR = os.path.join(ROOT, "docker", "kubernetes")
VALIDATE = os.path.join(ROOT, "tests", "k8s", "validate.mjs")


def node_validate(arg, stdin=None):
    if not shutil.which("node"):
        raise AssertionError("node is missing (make test installs it with the npm packages)")
    if not os.path.isdir(os.path.join(ROOT, "tests", "k8s", "node_modules", "kubernetes-models")):
        raise AssertionError("tests/k8s/node_modules is missing: run `make test` (npm ci)")
    return subprocess.run(["node", VALIDATE, arg], input=stdin, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def manifests():
    """{kind: object} of the kustomization's resources (one of each kind),
    and the kustomization itself."""
    with open(os.path.join(KDIR, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    out = {}
    for res in k["resources"]:
        with open(os.path.join(KDIR, res)) as f:
            for doc in yaml.safe_load_all(f):
                assert doc["kind"] not in out, "two %s objects" % doc["kind"]
                out[doc["kind"]] = doc
    return k, out


def pod(objs):
    return objs["Deployment"]["spec"]["template"]


def container(objs):
    cs = pod(objs)["spec"]["containers"]
    assert len(cs) == 1, cs
    return cs[0]


def config(objs):
    return objs["ConfigMap"]["data"]


def make_secret_files(d):
    """tls.crt, tls.key (self-signed for localhost/127.0.0.1) and api-key in d."""
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", os.path.join(d, "tls.key"), "-out", os.path.join(d, "tls.crt")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    with open(os.path.join(d, "api-key"), "w") as f:
        f.write("k8s-test-key\n")


# ===========================================================================

def test_every_object_validates():
    p = node_validate(KDIR)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1].endswith(" 0 failed"), lines
    seen = [re.match(r"ok\s+(\w+)/", ln).group(1) for ln in lines[:-1]]
    for kind in ("Kustomization", "ConfigMap", "Deployment", "Service",
                 "HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret"):
        assert kind in seen, (kind, seen)
    assert seen.count("HorizontalPodAutoscaler") == 2, "the queue-depth variant was not checked"
    assert seen.count("Secret") == 2, seen


def test_the_validator_fails_on_mistakes():
    with open(os.path.join(KDIR, "deployment.yaml")) as f:
        text = f.read()
    for wrong, why in (
            (text.replace("readinessProbe:", "readinesProbe:"), "readinesProbe: no such field"),
            (text.replace("containerPort: 8443", 'containerPort: "8443"'), "must be integer"),
            (text.replace("apps/v1", "apps/v2"), "no apps/v2 Deployment"),
            (text.replace("scheme: HTTPS", "schema: HTTPS", 1), "schema: no such field")):
        assert wrong != text, why
        p = node_validate("-", stdin=wrong)
        assert p.returncode == 1 and why in p.stdout, (why, p.stdout, p.stderr)
    with open(os.path.join(KDIR, "hpa.yaml")) as f:
        hpa = f.read()
    p = node_validate("-", stdin=hpa.replace("averageUtilization", "averageUtilisation"))
    assert p.returncode == 1 and "averageUtilisation: no such field" in p.stdout, p.stdout


def test_kubectl_kustomize_renders_valid_objects():
    if not shutil.which("kubectl"):
        raise run.Skip("kubectl is not installed (the manifests were validated directly)")
    with tempfile.TemporaryDirectory() as tmp:
        kdir = os.path.join(tmp, "kubernetes")
        shutil.copytree(KDIR, kdir)
        make_secret_files(os.path.join(kdir, "secrets"))
        p = subprocess.run(["kubectl", "kustomize", kdir], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        rendered = p.stdout
    v = node_validate("-", stdin=rendered)
    assert v.returncode == 0 and v.stdout.splitlines()[-1] == "7 passed, 0 failed", v.stdout
    objs = list(yaml.safe_load_all(rendered))
    secrets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}
    dep = next(o for o in objs if o["kind"] == "Deployment")
    mounted = {v["secret"]["secretName"] for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert mounted == set(secrets), (mounted, sorted(secrets))
    for name in secrets:       # content-hashed names: new files roll the pods
        assert re.fullmatch(r"attnbias-(tls|api-key)-[a-z0-9]{10}", name), name
    assert secrets[next(n for n in secrets if "-tls-" in n)]["type"] == "kubernetes.io/tls"
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "attnbias:0.1.0"


def test_readme_kubernetes_block():
    """README's Kubernetes block runs as written up to the line that needs a
    cluster -- in a scratch copy of docker/kubernetes (the secret files it
    makes stay out of the work tree), /tmp pointed at a scratch directory."""
    if not shutil.which("kubectl"):
        raise run.Skip("kubectl is not installed")
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"^```sh\n(.*?)^```", f.read(), re.M | re.S)
    (block,) = [b for b in blocks if "kubectl kustomize docker/kubernetes" in b]
    lines = block.replace("\\\n", " ").splitlines()
    cut = next(i for i, ln in enumerate(lines) if "a cluster is needed" in ln)
    assert lines[cut].startswith("kubectl apply -k docker/kubernetes"), lines[cut]
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docker"))
        shutil.copytree(KDIR, os.path.join(tmp, "docker", "kubernetes"))
        os.makedirs(os.path.join(tmp, "tests"))
        os.symlink(os.path.join(ROOT, "tests", "k8s"), os.path.join(tmp, "tests", "k8s"))
        script = "\n".join(lines[:cut]).replace("/tmp/", tmp + "/")
        p = subprocess.run(["bash", "-ec", script + "\n"], cwd=tmp, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert p.stdout.splitlines()[-1] == "7 passed, 0 failed", p.stdout
        key = open(os.path.join(tmp, "docker", "kubernetes", "secrets", "api-key")).read()
        assert re.fullmatch(r"[0-9a-f]{64}\n", key), key


def test_manifests_agree_with_each_other_and_the_image():
    k, objs = manifests()
    labels = pod(objs)["metadata"]["labels"]
    dep = objs["Deployment"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert objs["Service"]["spec"]["selector"].items() <= labels.items()
    assert objs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = objs["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": dep["metadata"]["name"]}
    assert hpa["minReplicas"] >= 2 and hpa["metrics"][0]["resource"]["name"] == "cpu"

    c = container(objs)
    cfg = config(objs)
    assert c["envFrom"] == [{"configMapRef": {"name": objs["ConfigMap"]["metadata"]["name"]}}]
    (port,) = c["ports"]
    assert port["containerPort"] == int(cfg["ATTNBIAS_PORT"]), (port, cfg["ATTNBIAS_PORT"])
    svc_port = objs["Service"]["spec"]["ports"][0]
    assert svc_port["targetPort"] == port["name"]
    tls = bool(cfg.get("ATTNBIAS_TLS_CERT"))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        g = c[probe]["httpGet"]
        assert g["port"] in (port["name"], port["containerPort"]), (probe, g)
        assert g.get("scheme", "HTTP") == ("HTTPS" if tls else "HTTP"), (probe, g)
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ann = pod(objs)["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics"
    assert int(ann["prometheus.io/port"]) == port["containerPort"]
    assert ann["prometheus.io/scheme"] == ("https" if tls else "http")

    # The image's user, and the restrictions it runs under.
    with open(os.path.join(ROOT, "docker", "Dockerfile")) as f:
        uid, gid = re.search(r"^USER (\d+):(\d+)$", f.read(), re.M).groups()
    psc, csc = pod(objs)["spec"]["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] and psc["runAsUser"] == int(uid) and psc["runAsGroup"] == int(gid)
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc["readOnlyRootFilesystem"] is True and csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert pod(objs)["spec"]["automountServiceAccountToken"] is False

    # Grace period: the preStop pause, then the whole drain, with room.
    pre = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre[0] == "/bin/sleep", pre
    grace = pod(objs)["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(pre[1]) + float(cfg["ATTNBIAS_DRAIN_S"]), (grace, pre, cfg)
    # One worker per CPU of the limit; requests equal to limits for the CPU.
    res = c["resources"]
    assert res["limits"]["cpu"] == res["requests"]["cpu"], res
    assert int(res["limits"]["cpu"]) == int(cfg["ATTNBIAS_THREADS"]), (res, cfg)
    assert res["limits"]["memory"] and res["requests"]["memory"]

    # The Secrets: generated by the kustomization, mounted where the
    # ConfigMap's file flags point.
    gen = {g["name"]: g for g in k["secretGenerator"]}
    vols = {v["name"]: v for v in pod(objs)["spec"]["volumes"]}
    mounts = {m["mountPath"]: vols[m["name"]] for m in c["volumeMounts"]}
    for var in ("ATTNBIAS_TLS_CERT", "ATTNBIAS_TLS_KEY", "ATTNBIAS_API_KEY_FILE"):
        d, base = os.path.split(cfg[var])
        vol = mounts[d]["secret"]
        keys = [f.split("=")[0] for f in gen[vol["secretName"]]["files"]]
        assert base in keys, (var, cfg[var], keys)
        assert vol["defaultMode"] & 0o440 == 0o440 and not vol["defaultMode"] & 0o007, vol
    assert all(m.get("readOnly") for m in c["volumeMounts"])


def test_the_server_runs_with_the_manifests_flags(binary):
    k, objs = manifests()
    cfg = dict(config(objs))
    p = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    flags = set(re.findall(r"^\s*--([a-z-]+)", p.stdout, re.M))
    for key in cfg:
        assert key.startswith("ATTNBIAS_") and \
            key[len("ATTNBIAS_"):].lower().replace("_", "-") in flags, key
    c = container(objs)
    with tempfile.TemporaryDirectory() as tmp:
        # The Secret files, at the mounted paths' file names.
        make_secret_files(tmp)
        env = dict(os.environ)
        env.update(cfg)
        for var in ("ATTNBIAS_TLS_CERT", "ATTNBIAS_TLS_KEY", "ATTNBIAS_API_KEY_FILE"):
            env[var] = os.path.join(tmp, os.path.basename(cfg[var]))
        # This machine's loopback and a free port instead of the pod's.
        env["ATTNBIAS_HOST"] = "127.0.0.1"
        env["ATTNBIAS_PORT"] = "0"
        srv = subprocess.Popen([binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True)
        try:
            line = srv.stdout.readline()
            m = re.search(r"listening on (https?)://127\.0\.0\.1:(\d+)", line)
            assert m, (line, srv.stderr.read() if srv.poll() is not None else "")
            assert m.group(1) == c["readinessProbe"]["httpGet"]["scheme"].lower()
            port = int(m.group(2))
            ctx = ssl.create_default_context(cafile=os.path.join(tmp, "tls.crt"))

            def get(path, key=None):
                conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30 * run.SLOW,
                                                   context=ctx)
                try:
                    conn.request("GET", path,
                                 headers={"Authorization": "Bearer " + key} if key else {})
                    r = conn.getresponse()
                    return r.status, r.read()
                finally:
                    conn.close()

            # Kubelet's probes carry no key, and must still pass.
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                path = c[probe]["httpGet"]["path"]
                status, body = get(path)
                assert status == 200, (probe, path, status, body)
            ann = pod(objs)["metadata"]["annotations"]
            status, body = get(ann["prometheus.io/path"])
            assert status == 200 and b"attnbias_queue_depth" in body, status
            # Elsewhere the key of the Secret is required.
            assert get("/v1/methods")[0] == 401
            assert get("/v1/methods", "k8s-test-key")[0] == 200
            # The HEALTHCHECK of the image, with the same environment.
            hc_env = dict(env, ATTNBIAS_PORT=str(port))
            h = subprocess.run([binary, "--healthcheck"], env=hc_env, capture_output=True,
                               text=True, timeout=60 * run.SLOW)
            assert h.returncode == 0, h.stderr
            # SIGTERM: the drain ends well within the grace period.
            t0 = time.monotonic()
            srv.send_signal(signal.SIGTERM)
            assert srv.wait(timeout=pod(objs)["spec"]["terminationGracePeriodSeconds"]
                            * run.SLOW) == 0
            assert time.monotonic() - t0 < float(cfg["ATTNBIAS_DRAIN_S"]) * run.SLOW
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
            srv.stdout.close()
            srv.stderr.close()
