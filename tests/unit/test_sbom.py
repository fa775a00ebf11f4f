"""The SBOM's assembly, on what facts.sh printed in a real composed image (recorded), against the
CycloneDX schema with the library's own validator."""

from __future__ import annotations

import json

from composer.config.values import is_sbom
from composer.verify.sbom import SBOM_PATH, make_sbom, parse_facts, validate, version_labels
from tests.unit.fake_engine import recorded_facts


def _sbom(ngc_plan, *backends, **options):
    facts = parse_facts(recorded_facts())
    plan = ngc_plan(*backends, **options)
    return facts, plan, make_sbom(plan, facts)


def test_the_facts_of_a_built_image():
    facts = parse_facts(recorded_facts())
    assert facts.os == "debian 12"
    names = {d.name for d in facts.debs}
    assert {"libc6", "dpkg", "base-files"} <= names
    assert all(d.arch and d.version for d in facts.debs)
    assert facts.python_version("numpy") == "1.26.4" and facts.python_version("NumPy") == "1.26.4"
    assert facts.collected["python"] == "3.11" and facts.composition["release"] == "24.09"
    assert version_labels(facts) == {"org.triton-composer.sbom": SBOM_PATH, "org.triton-composer.os": "debian 12",
                                     "org.triton-composer.numpy.version": "1.26.4",
                                     "org.triton-composer.python.version": "3.11"}


def test_the_document_validates_and_names_what_the_image_holds(ngc_plan):
    facts, plan, text = _sbom(ngc_plan, "onnxruntime", "python", labels=(("team", "ml"),))
    assert validate(text) is None
    document = json.loads(text)
    components = {c["bom-ref"]: c for c in document["components"]}
    debs = {c["name"]: c for c in components.values() if c.get("purl", "").startswith("pkg:deb/")}
    assert set(debs) == {d.name for d in facts.debs}
    libc = next(d for d in facts.debs if d.name == "libc6")
    assert debs["libc6"]["purl"] == f"pkg:deb/debian/libc6@{libc.version.replace('+', '%2B')}?arch=amd64&distro=debian-12"
    numpy = [c for c in components.values() if c.get("purl", "").startswith("pkg:pypi/numpy@")]
    assert [c["version"] for c in numpy] == ["1.26.4"]
    backends = {c["name"]: c for c in components.values() if c.get("group") == "triton.backend"}
    assert set(backends) == {"onnxruntime", "python"}
    assert all(b["version"] == plan.server_version for b in backends.values())
    full = next(p["value"] for p in backends["python"]["properties"] if p["name"] == "triton-composer:image")
    assert full == f"{plan.full.ref.rsplit(':', 1)[0]}@{plan.full.digest}"
    assert components["image:min"]["version"] == plan.min.digest
    libssl = components["file:/usr/lib/x86_64-linux-gnu/libcrypto.so.3"]
    assert {"name": "triton-composer:package", "value": "libssl3:amd64"} in libssl["properties"]
    needs = {d["ref"]: set(d.get("dependsOn", [])) for d in document["dependencies"]}
    assert any(r.endswith("libonnxruntime.so.1.20.1") for r in needs["triton:backend:onnxruntime"])
    assert any(r.startswith("pkg:pypi/numpy@1.26.4") for r in needs["triton:backend:python"])
    assert needs["triton:server"] == {"triton:backend:onnxruntime", "triton:backend:python"}
    properties = {p["name"]: p["value"] for p in document["metadata"]["properties"]}
    assert properties["triton-composer:backends"] == "onnxruntime,python"
    assert properties["triton-composer:label:team"] == "ml"
    assert document["metadata"]["timestamp"].startswith(dict(plan.labels)["org.opencontainers.image.created"][:19])


def test_one_composition_gives_one_document_and_another_a_different_one(ngc_plan):
    _, _, first = _sbom(ngc_plan, "onnxruntime", "python")
    _, _, again = _sbom(ngc_plan, "onnxruntime", "python")
    _, _, other = _sbom(ngc_plan, "python")
    assert first == again
    assert json.loads(first)["serialNumber"] != json.loads(other)["serialNumber"]
    # The tag is a name given to the image, not part of it: a tag per CI commit, the same image.
    _, _, tagged = _sbom(ngc_plan, "onnxruntime", "python", tag="team/triton:commit-1f2e3d")
    assert tagged == first and "commit-1f2e3d" not in tagged
    assert json.loads(first)["metadata"]["component"]["name"] == "tritonserver"
    assert "onnxruntime" not in {c["name"] for c in json.loads(other)["components"] if c.get("group")}


def test_only_a_document_the_composer_wrote_may_be_replaced(ngc_plan, tmp_path):
    _, _, text = _sbom(ngc_plan, "python")
    ours, theirs = tmp_path / "ours.json", tmp_path / "theirs.json"
    ours.write_text(text)
    theirs.write_text(json.dumps({"bomFormat": "CycloneDX", "metadata": {}}))
    assert is_sbom(ours) and not is_sbom(theirs) and not is_sbom(tmp_path / "absent.json")


def test_base_images_pinned_by_id_or_digest_are_named_so(ngc_plan):
    import dataclasses

    facts = parse_facts(recorded_facts())
    plan = ngc_plan("python")
    by_id = dataclasses.replace(plan, full=dataclasses.replace(plan.full, ref=plan.full.id, digest=None),
                                min=dataclasses.replace(plan.min, ref=plan.min.ref + "@" + plan.min.digest))
    text = make_sbom(by_id, facts)
    assert validate(text) is None
    components = {c["bom-ref"]: c for c in json.loads(text)["components"]}
    assert components["image:full"]["name"] == plan.full.id and "purl" not in components["image:full"]
    assert components["image:min"]["version"] == plan.min.digest


def test_each_model_environment_lists_its_own_packages_under_its_model(ngc_plan, tmp_path):
    from composer.config.model_envs import ENVS_ROOT, ModelEnv

    site = f"{ENVS_ROOT}/tok/lib/python3.10/site-packages"
    in_env = "".join(f"@@triton-composer-facts@@ python {site}/{name}-{version}.dist-info/METADATA\n"
                     f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n"
                     for name, version in (("tabulate", "0.8.10"), ("numpy", "1.25.0")))
    facts = parse_facts(recorded_facts().replace("@@triton-composer-facts@@ collected", in_env
                                                 + "@@triton-composer-facts@@ collected", 1))
    assert facts.python_version("numpy") == "1.26.4"  # the image's numpy, not the environment's pin
    plan = ngc_plan("python", model_envs=(ModelEnv("tok", ("tabulate==0.8.10", "numpy==1.25.0"), False, tmp_path),))
    text = make_sbom(plan, facts)
    assert validate(text) is None
    document = json.loads(text)
    top = {c["bom-ref"]: c for c in document["components"]}
    env = top["model-env:tok"]
    assert env["group"] == "triton.model-env"
    assert {(c["name"], c["version"]) for c in env["components"]} == {("tabulate", "0.8.10"), ("numpy", "1.25.0")}
    assert not any(c.get("name") == "tabulate" for c in top.values())  # only under its model
    assert [c["version"] for c in top.values() if c.get("purl", "").startswith("pkg:pypi/numpy@")] == ["1.26.4"]
    needs = {d["ref"]: set(d.get("dependsOn", [])) for d in document["dependencies"]}
    assert "model-env:tok" in needs["triton:backend:python"]
