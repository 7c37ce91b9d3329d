#!/usr/bin/env python3
"""Renders deploy/helm/ember with the real helm and checks the objects a cluster would get.

Usage: check_chart.py HELM CHART_DIR CUSTOM_VALUES. Runs `helm lint` and `helm template` with the
default values and with CUSTOM_VALUES, asserts on the rendered DaemonSet and RBAC, and checks that
values.schema.json rejects bad values. Ends with "N passed, N failed".
"""
import os
import re
import subprocess
import sys
import tempfile

import yaml

# The capability set docs/capabilities.md documents, in the chart's order.
CAPABILITIES = ["BPF", "PERFMON", "SYS_PTRACE", "SYS_RESOURCE", "DAC_READ_SEARCH", "SYSLOG",
                "SETPCAP"]

helm, chart, custom_values = sys.argv[1:4]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def helm_run(*args):
    return subprocess.run([helm, *args], capture_output=True, text=True)


def render(*extra):
    r = helm_run("template", "ember", chart, "--namespace", "profiling", *extra)
    if r.returncode != 0:
        raise SystemExit(f"check_chart: helm template {' '.join(extra)} failed:\n{r.stderr}")
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(r.stdout) if d}


def daemonset(objects):
    (ds,) = [o for (kind, _), o in objects.items() if kind == "DaemonSet"]
    return ds


def container(ds):
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def env(c):
    return {e["name"]: e for e in c.get("env", [])}


for values in ([], ["-f", custom_values]):
    r = helm_run("lint", "--strict", chart, *values)
    check(f"helm lint --strict {' '.join(values)}", r.returncode == 0, r.stdout + r.stderr)

# Default values.
objs = render()
ds = daemonset(objs)
pod = ds["spec"]["template"]["spec"]
c = container(ds)
sc = c["securityContext"]
check("hostPID", pod.get("hostPID") is True)
check("capabilities are exactly the documented set",
      sc.get("capabilities", {}).get("add") == CAPABILITIES, sc.get("capabilities"))
# docs/capabilities.md is the reference: its table names every capability the chart adds.
docs = os.path.join(chart, "..", "..", "..", "docs", "capabilities.md")
with open(docs, encoding="utf-8") as f:
    documented = re.findall(r"^\| `CAP_([A-Z_]+)`", f.read(), re.MULTILINE)
check("docs/capabilities.md documents each capability the chart adds",
      set(CAPABILITIES) <= set(documented), documented)
check("every other capability dropped", sc.get("capabilities", {}).get("drop") == ["ALL"])
check("not privileged by default", sc.get("privileged") is False)
check("debuginfod off by default, whatever the environment says",
      "--debuginfod-urls=" in c["args"] and
      not [a for a in c["args"] if a.startswith("--debuginfod-cache")] and
      "debuginfod-cache" not in {v["name"] for v in pod["volumes"]}, c["args"])
check("no privilege escalation", sc.get("allowPrivilegeEscalation") is False)
check("read-only root filesystem", sc.get("readOnlyRootFilesystem") is True)
# containerd's default profile allows bpf and perf_event_open for CAP_BPF and CAP_PERFMON.
check("seccomp profile: the runtime's default",
      sc.get("seccompProfile") == {"type": "RuntimeDefault"}, sc.get("seccompProfile"))
node_name = env(c).get("NODE_NAME", {})
check("NODE_NAME from the downward API",
      node_name.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
      node_name)
check("tolerates every taint", pod.get("tolerations") == [{"operator": "Exists"}])
# The status endpoint on the pod's IP (the kubelet probes that, not loopback), in a named port
# the probes point at.
check("status endpoint on every address of the pod",
      "--metrics-address=0.0.0.0:9464" in c["args"], c["args"])
check("container port 'metrics'",
      c.get("ports") == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}],
      c.get("ports"))
live, ready = c.get("livenessProbe", {}), c.get("readinessProbe", {})
check("liveness probe: GET /healthz on the metrics port",
      live.get("httpGet") == {"path": "/healthz", "port": "metrics"}, live)
check("readiness probe: GET /readyz on the metrics port",
      ready.get("httpGet") == {"path": "/readyz", "port": "metrics"}, ready)
probe_fields = {"initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold"}
check("probe timings set", probe_fields <= set(live) and probe_fields <= set(ready), (live, ready))
# The agent attaches in about 1-3 s: readiness comes soon after; a liveness restart needs several
# failures well past start-up, and each probe's timeout fits in its period.
check("readiness: first probe within 5 s, then every 10 s at most",
      ready.get("initialDelaySeconds", 99) <= 5 and ready.get("periodSeconds", 99) <= 10, ready)
check("liveness: not before 10 s, restarts only after 3 failures or more",
      live.get("initialDelaySeconds", 0) >= 10 and live.get("failureThreshold", 0) >= 3, live)
check("probe timeouts shorter than their periods",
      live.get("timeoutSeconds", 99) < live.get("periodSeconds", 0) and
      ready.get("timeoutSeconds", 99) < ready.get("periodSeconds", 0), (live, ready))
res = c.get("resources", {})
check("requests and limits set",
      {"cpu", "memory"} <= set(res.get("requests", {})) and
      {"cpu", "memory"} <= set(res.get("limits", {})), res)
check("no OTLP flags without an endpoint",
      not [a for a in c["args"] if a.startswith("--otlp")], c["args"])
check("no headers env without a Secret", "OTEL_EXPORTER_OTLP_HEADERS" not in env(c))
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
volumes = {v["name"]: v for v in pod["volumes"]}
for path in ("/sys/fs/cgroup", "/sys/kernel/btf"):
    m = mounts.get(path, {})
    check(f"{path} from the host, read-only",
          m.get("readOnly") is True and
          volumes.get(m.get("name"), {}).get("hostPath", {}).get("path") == path, m)
role = objs[("ClusterRole", "ember")]
check("ClusterRole: get/list/watch on pods only",
      role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                         "verbs": ["get", "list", "watch"]}], role["rules"])
binding = objs[("ClusterRoleBinding", "ember")]
sa = objs.get(("ServiceAccount", "ember"))
check("binding ties the role to the pod's service account",
      sa is not None and binding["roleRef"]["name"] == "ember" and
      binding["subjects"] == [{"kind": "ServiceAccount", "name": "ember",
                               "namespace": "profiling"}] and
      pod["serviceAccountName"] == "ember", binding)

# Non-default values.
objs = render("-f", custom_values)
ds = daemonset(objs)
pod = ds["spec"]["template"]["spec"]
c = container(ds)
sc = c["securityContext"]
check("privileged when asked", sc.get("privileged") is True and "capabilities" not in sc, sc)
headers = env(c).get("OTEL_EXPORTER_OTLP_HEADERS", {})
check("headers env from the Secret",
      headers.get("valueFrom", {}).get("secretKeyRef") == {"name": "ember-otlp", "key": "headers"},
      headers)
check("headers not in the args", not [a for a in c["args"] if "header" in a], c["args"])
args = c["args"]
for flag in ("--sampling-hz=99", "--otlp-endpoint=collector.observability:4317",
             "--otlp-protocol=http/protobuf", "--otlp-ca-file=/etc/ember/otlp-ca/ca.pem",
             "--otlp-client-cert=/etc/ember/otlp-client/tls.crt",
             "--otlp-client-key=/etc/ember/otlp-client/tls.key"):
    check(f"arg {flag}", flag in args, args)
for flag in ("--debuginfod-urls=https://debuginfod.example https://debuginfod.debian.net",
             "--debuginfod-cache-dir=/var/cache/ember/debuginfod",
             "--debuginfod-cache-bytes=2GiB"):
    check(f"arg {flag}", flag in args, args)
mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
check("debuginfod cache mounted", mounts.get("debuginfod-cache", {}).get("mountPath") ==
      "/var/cache/ember", mounts)
check("extra args last, in order", args[-2:] == ["--stack-snapshot-bytes", "8192"], args)
check("extra env", env(c).get("OTEL_SERVICE_NAME") == {"name": "OTEL_SERVICE_NAME",
                                                        "value": "ember"})
volumes = {v["name"]: v for v in pod["volumes"]}
check("CA from the ConfigMap", volumes.get("otlp-ca", {}).get("configMap", {}).get("name") ==
      "otlp-ca", volumes.get("otlp-ca"))
check("debuginfod cache on the node",
      volumes.get("debuginfod-cache", {}).get("hostPath") ==
      {"path": "/var/cache/ember", "type": "DirectoryOrCreate"}, volumes.get("debuginfod-cache"))
check("client certificate from the Secret",
      volumes.get("otlp-client", {}).get("secret", {}).get("secretName") == "ember-client-tls")
check("image", c["image"] == "registry.example/ember-agent:1.2.3", c["image"])
check("priorityClassName", pod.get("priorityClassName") == "system-node-critical")
check("nodeSelector", pod.get("nodeSelector") == {"kubernetes.io/os": "linux"})
check("tolerations replaced", pod.get("tolerations") == [
    {"key": "dedicated", "operator": "Equal", "value": "profiling", "effect": "NoSchedule"}])

# Another metrics port moves the flag and the named port together; the probes follow the name.
c = container(daemonset(render("--set", "metrics.port=9500",
                               "--set", "probes.readiness.periodSeconds=7")))
check("metrics.port sets the flag and the container port",
      "--metrics-address=0.0.0.0:9500" in c["args"] and
      c["ports"] == [{"name": "metrics", "containerPort": 9500, "protocol": "TCP"}],
      (c["args"], c["ports"]))
check("probes still on the named port",
      c["livenessProbe"]["httpGet"]["port"] == "metrics" and
      c["readinessProbe"]["httpGet"]["port"] == "metrics")
check("one probe timing changed, the others kept",
      c["readinessProbe"]["periodSeconds"] == 7 and
      c["readinessProbe"]["initialDelaySeconds"] == ready["initialDelaySeconds"])
# CRI-O's default profile refuses bpf without SYS_ADMIN: Unconfined or a node's own profile.
sc = container(daemonset(render("--set", "seccompProfile.type=Unconfined")))["securityContext"]
check("seccompProfile Unconfined", sc.get("seccompProfile") == {"type": "Unconfined"}, sc)
sc = container(daemonset(render("--set", "seccompProfile.type=Localhost", "--set",
                                "seccompProfile.localhostProfile=profiles/ember.json")))[
    "securityContext"]
check("seccompProfile Localhost with its file",
      sc.get("seccompProfile") == {"type": "Localhost",
                                   "localhostProfile": "profiles/ember.json"}, sc)
# Probes off: the endpoint stays, for Prometheus.
c = container(daemonset(render("--set", "probes.enabled=false")))
check("no probes when disabled, endpoint kept",
      "livenessProbe" not in c and "readinessProbe" not in c and
      c["ports"][0]["name"] == "metrics", c)

# The schema turns bad values away before anything renders.
for bad in (["--set-string", "samplingHz=fast"], ["--set", "samplingHz=5000"],
            ["--set", "otlp.protocol=udp"], ["--set", "privileged=yes-please"],
            ["--set", "no_such_value=1"], ["--set", "metrics.port=0"],
            ["--set", "metrics.port=70000"], ["--set", "probes.port=8080"],
            ["--set", "probes.liveness.periodSeconds=0"], ["--set", "seccompProfile.type=Off"],
            ["--set", "seccompProfile.type=Localhost"]):
    r = helm_run("template", "ember", chart, *bad)
    check(f"schema rejects {bad[-1]}",
          r.returncode != 0 and "schema" in r.stderr, (r.returncode, r.stderr[-300:]))
with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
    f.write('samplingHz: "fast"\n')
    f.flush()
    r = helm_run("lint", chart, "-f", f.name)
    check("helm lint rejects samplingHz: \"fast\"", r.returncode != 0, r.stdout)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
