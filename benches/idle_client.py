"""Opens N keep-alive connections to one server, one proxied GET on each, and leaves them idle;
prints the server's resident memory before and after, per connection, then sends one more GET
on every connection and checks each is answered. Used by benches/idle.sh (read it for how).

usage: idle_client.py PORT TLS(0|1) N PID [PID...]
"""

import resource
import socket
import ssl
import sys
import time

REQUEST = b"GET /idle HTTP/1.1\r\nHost: bench.test\r\n\r\n"
# Loopback has ~28,000 ephemeral ports per source address (ip_local_port_range): every
# PER_SOURCE connections the client binds the next 127.0.0.x.
PER_SOURCE = 20000


def rss_bytes(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


def read_response(sock):
    """Reads one response with a Content-Length body; its status code."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the head ended")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the body")
        body += chunk
    return int(lines[0].split()[1])


def connect(port, tls_context, index):
    source = f"127.0.0.{1 + index // PER_SOURCE}"
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    if tls_context is not None:
        sock = tls_context.wrap_socket(sock, server_hostname="bench.test")
    return sock


def main():
    port, tls, n = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
    pids = [int(p) for p in sys.argv[4:]]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if n + 100 > hard:
        sys.exit(f"N={n} connections need {n + 100} open files; this machine's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["http/1.1"])
    # Warm up: the server's first requests allocate what every later one reuses.
    for i in range(50):
        with connect(port, context, i) as sock:
            sock.sendall(REQUEST)
            read_response(sock)
    time.sleep(1)
    before = rss_bytes(pids)
    started = time.monotonic()
    socks = []
    for i in range(n):
        sock = connect(port, context, i)
        sock.sendall(REQUEST)
        status = read_response(sock)
        if status != 200:
            sys.exit(f"connection {i}: answered {status}, expected 200")
        socks.append(sock)
    time.sleep(2)
    after = rss_bytes(pids)
    opened = time.monotonic() - started
    # Every idle connection still serves a request.
    for i, sock in enumerate(socks):
        sock.sendall(REQUEST)
        try:
            status = read_response(sock)
        except ConnectionError as error:
            sys.exit(f"idle connection {i} of {n}: {error}")
        if status != 200:
            sys.exit(f"idle connection {i}: answered {status}, expected 200")
    for sock in socks:
        sock.close()
    print(
        f"{(after - before) / n:.0f} {before // 1024} {after // 1024} {opened:.1f}",
        flush=True,
    )


main()
