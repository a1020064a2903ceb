"""Renders and validates the deployment files (scripts/validate-deploy runs it in a venv).

- Renders deploy/helm/pulse-intelligence with Helm's own engine (helm-python-sdk embeds the
  Helm v4 Go SDK) for values.yaml, values-hosted.yaml and a third case that turns on every
  optional template (chart-made Secret, agent DaemonSet, ingress, autoscalers, ServiceMonitor).
- Validates every rendered manifest in strict mode against the Kubernetes schemas carried by
  kubernetes-validate, for the oldest and the newest Kubernetes the chart supports. The
  ServiceMonitor (a CRD, which kubernetes-validate has no schema for) is checked against
  deploy/k8s/schemas/servicemonitor.monitoring.coreos.com.v1.json; any other kind without a
  schema is an error.
- Checks that values the chart must refuse are refused with the chart's message.
- Checks that deploy/k8s/default.yaml and deploy/k8s/hosted.yaml equal a fresh render
  (--write rewrites them).
- Validates compose.yaml with each override under deploy/compose/ with `docker-compose config -q`.

Exit status 0 when everything holds; 1 with one line per problem otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "pulse-intelligence"
K8S = ROOT / "deploy" / "k8s"
RELEASE = "pulse-intelligence"
NAMESPACE = "pulse"
KUBERNETES_VERSIONS = ["1.25.0", "1.37.0"]
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): K8S / "schemas" / "servicemonitor.monitoring.coreos.com.v1.json",
}
# A 32-byte key of zeros: only for rendering the chart-made Secret in this check, never deployed.
TEST_MASTER_KEY = "A" * 43 + "="

# Every optional template on, over values.yaml. Values here are test fixtures, not secrets.
EVERYTHING_ON = {
    "secrets": {
        "create": True,
        "databaseUrl": "postgres://pulse:fixture@postgres:5432/pulse",
        "databaseAppPassword": "fixture",
        "masterKey": TEST_MASTER_KEY,
        "providerKeys": {"openai": "fixture-key", "open-router": "fixture-key"},
    },
    "agent": {"daemonset": {"enabled": True}, "token": "fixture-token", "enableCommands": True},
    "ingress": {"enabled": True, "className": "nginx", "tls": [{"secretName": "tls", "hosts": ["pulse.example.com"]}]},
    "serviceMonitor": {"enabled": True},
    "services": {"gateway": {"hpa": {"enabled": True}}, "verifier": {"enabled": False}},
    "telemetry": {"otelEndpoint": "http://otel-collector:4318"},
    "nats": {"subjectPrefix": "staging"},
}

# Values the chart must refuse, and a piece of the message it must refuse them with.
MUST_FAIL = [
    ({"secrets": {"create": True, "databaseUrl": "postgres://x@y/z", "masterKey": "c2hvcnQ="}}, "exactly 32 bytes"),
    ({"secrets": {"create": True, "masterKey": TEST_MASTER_KEY}}, "secrets.databaseUrl is required"),
    ({"secrets": {"create": False, "existingSecret": ""}}, "secrets.existingSecret must name a Secret"),
]

EXAMPLES = {"default.yaml": [], "hosted.yaml": ["values-hosted.yaml"]}


def deep_merge(base, over):
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def render(values_files, extra=None):
    """{template path: text} as `helm template` renders it, NOTES.txt left out."""
    values = {}
    for name in values_files:
        values = deep_merge(values, yaml.safe_load((CHART / name).read_text()) or {})
    if extra:
        values = deep_merge(values, extra)
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return {path: text for path, text in rendered.items() if not path.endswith("NOTES.txt")}


def documents(rendered):
    """(template path, manifest) for every non-empty YAML document."""
    for path in sorted(rendered):
        for doc in yaml.safe_load_all(rendered[path]):
            if doc:
                yield path, doc


def example_text(rendered, values_files):
    sources = ", ".join(["values.yaml"] + values_files)
    out = [
        "# Rendered from deploy/helm/pulse-intelligence (" + sources + ") by scripts/validate-deploy --write;",
        "# do not edit by hand. Release " + RELEASE + ", namespace " + NAMESPACE + ".",
    ]
    for path in sorted(rendered):
        for chunk in rendered[path].split("\n---\n"):
            body = chunk.strip().removeprefix("---").strip()
            if body:
                out += ["---", "# Source: " + path, body]
    return "\n".join(out) + "\n"


def validate(label, rendered, problems):
    kinds = {}
    for path, doc in documents(rendered):
        kind = doc.get("kind", "?")
        where = f"{label}: {path}: {kind}/{doc.get('metadata', {}).get('name', '?')}"
        kinds[kind] = kinds.get(kind, 0) + 1
        schema_path = CRD_SCHEMAS.get((doc.get("apiVersion"), kind))
        if schema_path is not None:
            schema = json.loads(schema_path.read_text())
            for error in jsonschema.Draft202012Validator(schema).iter_errors(doc):
                problems.append(f"{where}: {'.'.join(map(str, error.absolute_path))}: {error.message}")
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                problems.append(f"{where}: no schema for {doc.get('apiVersion')} {kind} in Kubernetes {version}")
            except kubernetes_validate.ValidationError as error:
                location = ".".join(map(str, error.path))
                problems.append(f"{where}: Kubernetes {version}: {location}: {error.message}")
    return kinds


def check_refusals(problems):
    for extra, expected in MUST_FAIL:
        try:
            render([], extra)
        except helm.HelmError as error:
            if expected not in str(error):
                problems.append(f"refusal: {extra} failed with {error!s}, expected a message containing {expected!r}")
            continue
        problems.append(f"refusal: {extra} rendered, but the chart must refuse it ({expected})")


def compose_checks(problems):
    """docker-compose config -q for compose.yaml alone and with each override."""
    compose = ROOT / "compose.yaml"
    overrides = sorted((ROOT / "deploy" / "compose").glob("*.yaml"))
    overrides = [o for o in overrides if o.name != "otel-collector.yaml"]
    env_text = (ROOT / ".env.example").read_text()
    # The example leaves secrets empty on purpose; compose refuses to start without them.
    fixture = {"POSTGRES_PASSWORD": "fixture", "PULSE_APP_DB_PASSWORD": "fixture",
               "OPENAI_API_KEY": "fixture", "ANTHROPIC_API_KEY": "fixture", "GEMINI_API_KEY": "fixture"}
    lines = [line for line in env_text.splitlines() if line.split("=", 1)[0] not in fixture]
    lines += [f"{key}={value}" for key, value in fixture.items()]
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "env"
        env_file.write_text("\n".join(lines) + "\n")
        empty = Path(tmp) / "empty.env"
        empty.write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSE_", "POSTGRES_"))}
        cases = [[]] + [[o] for o in overrides]
        for files in cases:
            args = ["docker-compose", "--env-file", str(env_file), "--project-directory", str(ROOT), "-f", str(compose)]
            for o in files:
                args += ["-f", str(o)]
            label = " + ".join(["compose.yaml"] + [str(o.relative_to(ROOT)) for o in files])
            result = subprocess.run(args + ["config", "-q"], capture_output=True, text=True, env=env, timeout=60)
            if result.returncode != 0:
                problems.append(f"{label}: docker-compose config -q: {result.stderr.strip()}")
            checked += 1
        # Without the secrets the stack must refuse to start, naming the missing one.
        args = ["docker-compose", "--env-file", str(empty), "--project-directory", str(ROOT), "-f", str(compose), "config", "-q"]
        result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
        if result.returncode == 0 or "POSTGRES_PASSWORD" not in result.stderr:
            problems.append("compose.yaml: accepted an environment without POSTGRES_PASSWORD")
    return checked


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite deploy/k8s/*.yaml from a fresh render")
    parser.add_argument("--values", action="append", default=[], help="an extra values file over values.yaml (for checking a change)")
    parser.add_argument("--no-compose", action="store_true", help="skip the docker-compose checks")
    args = parser.parse_args()
    problems = []

    lint = helm.lint(str(CHART))
    for message in lint.get("errors") or []:
        problems.append(f"helm lint: {message}")
    for message in lint.get("messages") or []:
        if message.get("severity", 0) >= 2:
            problems.append(f"helm lint: {message.get('path')}: {message.get('error')}")

    extra = {}
    for path in args.values:
        extra = deep_merge(extra, yaml.safe_load(Path(path).read_text()) or {})

    for name, values_files in EXAMPLES.items():
        try:
            rendered = render(values_files, extra)
        except helm.HelmError as error:
            problems.append(f"{name}: render failed: {error}")
            continue
        kinds = validate(name, rendered, problems)
        print(f"{name}: {sum(kinds.values())} manifests ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}) "
              f"checked against Kubernetes {' and '.join(KUBERNETES_VERSIONS)}")
        text = example_text(rendered, values_files)
        target = K8S / name
        if args.write:
            target.write_text(text)
        elif not args.values and (not target.exists() or target.read_text() != text):
            problems.append(f"deploy/k8s/{name} differs from a fresh render: run scripts/validate-deploy --write")

    try:
        kinds = validate("everything-on", render([], deep_merge(EVERYTHING_ON, extra)), problems)
        print(f"everything-on: {sum(kinds.values())} manifests ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    except helm.HelmError as error:
        problems.append(f"everything-on: render failed: {error}")
    check_refusals(problems)
    print(f"refusals: {len(MUST_FAIL)} invalid value sets checked")

    if not args.no_compose:
        checked = compose_checks(problems)
        print(f"compose: {checked} file combinations checked with docker-compose config -q")

    print(f"helm {helm.helm_sdk_version()} (helm-python-sdk), kubernetes-validate {kubernetes_validate.version.__version__ if hasattr(kubernetes_validate.version, '__version__') else ''}".rstrip())
    for problem in problems:
        print("problem: " + problem, file=sys.stderr)
    if problems:
        print(f"validate-deploy: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("validate-deploy: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
