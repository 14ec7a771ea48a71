"""kilnd serves the standard grpc.health.v1 service and documents its flags."""
from __future__ import annotations

import subprocess

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kiln import daemon


def test_health_service_reports_serving(daemon_up):
    channel = grpc.insecure_channel(daemon.target_for(daemon_up.socket))
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()


def test_help_documents_every_flag(kilnd):
    out = subprocess.run([kilnd.binary, "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for flag in ("--socket", "--tcp", "--cache-dir", "--no-cache", "--threads",
                 "--log-level", "--log-file", "--version", "--help"):
        assert flag in out.stdout, flag


def test_bad_flag_is_a_clear_error(kilnd):
    out = subprocess.run([kilnd.binary, "--frobnicate"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 2
    assert "unknown flag '--frobnicate'" in out.stderr


def test_second_daemon_on_the_same_socket_refuses(daemon_up):
    out = subprocess.run([daemon_up.binary, "--socket", daemon_up.socket], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 3
    assert "another kilnd holds" in out.stderr
    # The first daemon still serves.
    assert daemon.probe(daemon_up.socket, 5.0)
