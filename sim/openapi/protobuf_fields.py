#!/usr/bin/env python3
"""Writes sim/openapi/protobuf.json: for each Kubernetes protobuf message the simulator may receive, its fields
(tag, JSON name, wire kind, message type). Read from the prost sources of the k8s-pb crate (field tags), with
JSON names checked against sim/openapi/schemas.json. Dev-time only:

    python3 sim/openapi/protobuf_fields.py ~/.cargo/registry/src/*/k8s-pb-0.9.0/src
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Packages whose messages the served kinds can contain.
PACKAGES = ["api/core/v1", "api/admissionregistration/v1", "api/apps/v1", "api/policy/v1", "api/rbac/v1", "api/coordination/v1", "api/events/v1",
            "api/autoscaling/v1", "api/autoscaling/v2", "api/storage/v1", "apimachinery/pkg/apis/meta/v1", "apimachinery/pkg/api/resource",
            "apimachinery/pkg/util/intstr", "apimachinery/pkg/runtime"]
ATTRIBUTE = re.compile(r'#\[prost\((?P<body>[^\]]*)\)\]\s*pub (?P<name>(r#)?[a-z0-9_]+):\s*(?P<type>[^;]*?),\s*(?=(///|#\[|pub |\}))', re.S)
STRUCT = re.compile(r'pub struct (\w+) \{(.*?)\n\}', re.S)


def package_of(path):
    return "k8s.io." + path.replace("/", ".")


def resolve(rust_type, module):
    """`super::super::super::apimachinery::pkg::apis::meta::v1::ObjectMeta` seen from module `api/core/v1`."""
    rust_type = re.sub(r"\s+", "", rust_type)
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        while rust_type.startswith(wrapper):
            rust_type = rust_type[len(wrapper):-1]
    if rust_type.startswith("::prost::alloc::collections::BTreeMap<"):
        rust_type = rust_type[len("::prost::alloc::collections::BTreeMap<"):-1].split(",", 1)[1].rstrip(",")
        return resolve(rust_type, module)
    parts = rust_type.split("::")
    path = module.split("/")
    while parts and parts[0] == "super":
        parts.pop(0)
        path.pop()
    return package_of("/".join(path + parts[:-1])) + "." + parts[-1]


def camel(name):
    name = name.replace("r#", "")
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def main(source):
    schemas = json.load(open(os.path.join(HERE, "schemas.json")))["schemas"]
    messages = {}
    for module in PACKAGES:
        text = open(os.path.join(source, module, "mod.rs")).read()
        for struct, body in STRUCT.findall(text):
            full = package_of(module) + "." + struct
            properties = schemas.get("io.k8s." + full[len("k8s.io."):], {}).get("properties", {})
            by_key = {key.lower(): key for key in properties}
            fields = []
            for match in ATTRIBUTE.finditer(body + "\npub "):
                attribute = match.group("body")
                tag = int(re.search(r'tag = "(\d+)"', attribute).group(1))
                name = camel(match.group("name"))
                name = by_key.get(name.lower(), name)
                repeated = "repeated" in attribute
                mapping = re.search(r'btree_map = "string, (\w+)"', attribute)
                if mapping:
                    kind = "map:" + mapping.group(1)
                else:
                    kind = attribute.split(",")[0].split("=")[0].strip()
                field = [tag, name, kind, repeated]
                if kind in ("message", "map:message"):
                    field.append(resolve(match.group("type"), module))
                fields.append(field)
            messages[full] = fields
    out = os.path.join(HERE, "protobuf.json")
    with open(out, "w") as handle:
        json.dump({"source": "k8s-pb 0.9.0", "messages": messages}, handle, sort_keys=True, separators=(",", ":"))
        handle.write("\n")
    print(f"{out}: {len(messages)} messages")


if __name__ == "__main__":
    main(sys.argv[1])
