"""A Python gRPC client of the Platform API, as a Python user would write one.

Uses Debian's python3-grpcio and stubs that protoc and grpc_python_plugin
generated from proto/ and third_party/ (see test/python-grpc.test.ts, which
runs this script and checks what it prints).

Usage: client.py STUBS_DIR HOST:PORT, with the bearer token in PLATFORM_TOKEN.
Prints one JSON object with what each call returned.
"""

import importlib
import json
import os
import sys

stubs_dir, target = sys.argv[1], sys.argv[2]
sys.path.insert(0, stubs_dir)

import grpc  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, field_mask_pb2  # noqa: E402
from google.rpc import error_details_pb2, status_pb2  # noqa: E402

import platformapi  # noqa: E402
from health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from platformapi.iam.v2beta1 import groups_pb2, groups_pb2_grpc  # noqa: E402
from platformapi.common.v1 import uidp_pb2  # noqa: E402
from reflection.v1 import reflection_pb2, reflection_pb2_grpc  # noqa: E402

GROUPS = "platformapi.iam.v2beta1.GroupsService"
METADATA = (("authorization", "Bearer " + os.environ["PLATFORM_TOKEN"]),)
TIMEOUT = 10


def import_every_stub():
    """Imports every generated module under platformapi: the package name must not shadow anything."""
    # protoc writes no __init__.py, and pkgutil does not walk namespace packages: walk the files.
    names = []
    for root in platformapi.__path__:
        for folder, _, files in os.walk(root):
            package = os.path.relpath(folder, os.path.dirname(root)).replace(os.sep, ".")
            names += [package + "." + f[:-3] for f in files if f.endswith(("_pb2.py", "_pb2_grpc.py"))]
    for name in names:
        importlib.import_module(name)
    return sorted(names)


def group_json(g):
    return {
        "uid": g.uid,
        "name": g.name,
        "description": g.description,
        "createTime": g.create_time.ToJsonString(),
        "updateTime": g.update_time.ToJsonString(),
    }


def rpc_error(err):
    """The code, message and decoded grpc-status-details-bin of a failed call."""
    out = {"code": err.code().name, "details": err.details()}
    raw = [v for k, v in (err.trailing_metadata() or ()) if k == "grpc-status-details-bin"]
    if not raw:
        return out
    status = status_pb2.Status.FromString(raw[0])
    out["status"] = {"code": status.code, "message": status.message, "details": []}
    for any_detail in status.details:
        if any_detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            any_detail.Unpack(info)
            decoded = {"reason": info.reason, "domain": info.domain, "metadata": dict(info.metadata)}
        elif any_detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            any_detail.Unpack(bad)
            decoded = {"fieldViolations": [{"field": v.field, "description": v.description} for v in bad.field_violations]}
        else:
            decoded = {}
        out["status"]["details"].append({"typeUrl": any_detail.type_url, **decoded})
    return out


def failing(call, request):
    try:
        call(request, metadata=METADATA, timeout=TIMEOUT)
    except grpc.RpcError as err:
        return rpc_error(err)
    return {"code": "OK"}


def groups_crud(channel):
    stub = groups_pb2_grpc.GroupsServiceStub(channel)
    out = {}
    org = stub.CreateGroup(
        groups_pb2.CreateGroupRequest(group=groups_pb2.Group(name="python org", description="from grpcio")),
        metadata=METADATA, timeout=TIMEOUT)
    out["created"] = group_json(org)
    team = stub.CreateGroup(
        groups_pb2.CreateGroupRequest(parent=org.uid, group=groups_pb2.Group(name="py team")),
        metadata=METADATA, timeout=TIMEOUT)
    out["child"] = group_json(team)
    out["got"] = group_json(stub.GetGroup(groups_pb2.GetGroupRequest(uid=team.uid), metadata=METADATA, timeout=TIMEOUT))
    stub.CreateGroup(
        groups_pb2.CreateGroupRequest(parent=org.uid, group=groups_pb2.Group(name="another team")),
        metadata=METADATA, timeout=TIMEOUT)
    listed = stub.ListGroups(
        groups_pb2.ListGroupsRequest(uidp=uidp_pb2.UIDPFilter(children_of=org.uid), order_by="name"),
        metadata=METADATA, timeout=TIMEOUT)
    out["listed"] = {
        "names": [g.name for g in listed.groups],
        "hasTotalCount": listed.HasField("total_count"),
        "totalCount": listed.total_count,
        "nextPageToken": listed.next_page_token,
    }
    updated = stub.UpdateGroup(
        groups_pb2.UpdateGroupRequest(
            group=groups_pb2.Group(uid=team.uid, name="ignored", description="updated from python"),
            update_mask=field_mask_pb2.FieldMask(paths=["description"])),
        metadata=METADATA, timeout=TIMEOUT)
    out["updated"] = group_json(updated)
    deleted = stub.DeleteGroup(groups_pb2.DeleteGroupRequest(uid=team.uid), metadata=METADATA, timeout=TIMEOUT)
    out["deleted"] = type(deleted).DESCRIPTOR.full_name
    out["getDeleted"] = failing(stub.GetGroup, groups_pb2.GetGroupRequest(uid=team.uid))
    out["invalidName"] = failing(
        stub.CreateGroup, groups_pb2.CreateGroupRequest(parent=org.uid, group=groups_pb2.Group(name="Bad Name")))
    unauthenticated = None
    try:
        stub.GetGroup(groups_pb2.GetGroupRequest(uid=org.uid), timeout=TIMEOUT)
    except grpc.RpcError as err:
        unauthenticated = err.code().name
    out["withoutToken"] = unauthenticated
    return out


def health(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    name = health_pb2.HealthCheckResponse.ServingStatus.Name
    return {
        "server": name(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT).status),
        "groups": name(stub.Check(health_pb2.HealthCheckRequest(service=GROUPS), timeout=TIMEOUT).status),
        "unknown": failing(stub.Check, health_pb2.HealthCheckRequest(service="no.such.Service"))["code"],
    }


def reflection(channel):
    """Lists the services, then describes GroupsService from the descriptors the server sends."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=GROUPS),
    ]
    responses = list(stub.ServerReflectionInfo(iter(requests), timeout=TIMEOUT))
    services = sorted(s.name for s in responses[0].list_services_response.service)
    files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
             for raw in responses[1].file_descriptor_response.file_descriptor_proto]
    # A pool of its own: the server's files, dependencies first, as a dynamic client would build it.
    pool = descriptor_pool.DescriptorPool()
    added = set()

    def add(name):
        if name in added:
            return
        file = next(f for f in files if f.name == name)
        for dep in file.dependency:
            add(dep)
        pool.Add(file)
        added.add(name)

    add(files[0].name)
    service = pool.FindServiceByName(GROUPS)
    return {
        "services": services,
        "file": files[0].name,
        "package": files[0].package,
        "methods": [m.name for m in service.methods],
    }


def main():
    result = {"stubs": import_every_stub()}
    with grpc.insecure_channel(target) as channel:
        grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
        result["groups"] = groups_crud(channel)
        result["health"] = health(channel)
        result["reflection"] = reflection(channel)
    json.dump(result, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
