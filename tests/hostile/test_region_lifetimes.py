"""Point 4: every RPC that reads a region keeps it mapped for the whole read.

A client unregisters the region an upload reads from while the daemon is
still hashing it. Whichever lands first, the daemon must not touch an
unmapped page: the upload either succeeds with the bytes the client wrote
or fails with a clear status.
"""
from __future__ import annotations

import grpc
import torch

from conftest import sha256_hex

MIB = 1 << 20


def test_unregister_during_upload_never_unmaps_what_is_being_read(kilnd, bystander, hostile):
    elements = 64 * MIB // 4
    for attempt in range(6):
        region = hostile.region(64 * MIB)
        weight = torch.full((elements,), float(attempt + 1))
        desc = region.write(0, weight)
        digest = sha256_hex(weight)
        upload = hostile.stub.UploadConstants.future(
            _request(hostile, digest, desc), timeout=120)
        hostile.unregister(region.region_id)
        try:
            upload.result()
        except grpc.RpcError as e:
            # Unregistered before the daemon looked: the descriptor names a
            # region the session no longer has (an argument error, not
            # NOT_FOUND, which clients read as a restarted daemon).
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
            assert f"region {region.region_id} is not registered" in e.details(), e.details()
        region.close()
        assert kilnd.alive(), f"kilnd {kilnd.exit_description()}:\n{kilnd.log()}"
    bystander.check()


def _request(client, digest, desc):
    from kiln.v1 import kiln_pb2
    return kiln_pb2.UploadConstantsRequest(
        session_id=client.session, constants=[kiln_pb2.ConstantUpload(hash=digest, data=desc)])


def test_upload_from_an_unregistered_region_is_refused_by_name(kilnd, bystander, hostile):
    # The ordering the race above reaches only sometimes, made certain.
    region = hostile.region(MIB)
    weight = torch.full((MIB // 4,), 7.0)
    desc = region.write(0, weight)
    hostile.unregister(region.region_id)
    try:
        hostile.stub.UploadConstants(_request(hostile, sha256_hex(weight), desc), timeout=30)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
        assert f"region {region.region_id} is not registered" in e.details(), e.details()
    else:
        raise AssertionError("an upload from an unregistered region was accepted")
    finally:
        region.close()
    assert kilnd.alive(), f"kilnd {kilnd.exit_description()}:\n{kilnd.log()}"
    bystander.check()
