"""test_drain.py: stopping under load, and what a drain owes the connections
it finds -- SIGTERM during a storm of connections (the server exits 0, every
time), a request sent to a stopped server (SIGSTOP) before SIGTERM is
answered, a new connection's first request and a kept-alive connection's
begun request are waited for, an idle kept-alive connection is not, and
--max-connections keeps the others in the kernel's queue until one closes.
Conventions: see run.py."""

import json
import os
import signal
import socket
import threading
import time

import run

BIAS = json.dumps({"method": "alibi", "num_heads": 2, "q_len": 4, "k_len": 4}).encode()
POST_BIAS = (b"POST /v1/bias HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n%s" % (len(BIAS), BIAS))
GET_HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
# The drain waits on events in these tests, never on its deadline: a bound
# no run reaches, so that an answer can only come from the server waiting.
NEVER = "3600"


def problem_503(status, headers, body):
    assert status == 503, (status, body[:300])
    assert headers.get("connection", "").lower() == "close", headers
    assert headers.get("content-type", "").startswith("application/problem+json"), headers
    assert json.loads(body)["status"] == 503, body


def check_drain_answer(status, headers, body):
    """A request that reached a draining server: computed if it was admitted
    before the drain began, else refused with 503 and Connection: close."""
    if status == 200:
        assert json.loads(body)["bias"]["shape"] == [2, 4, 4], body[:300]
    else:
        problem_503(status, headers, body)


def wait_refused(srv):
    """Until the listening socket is closed: the drain has begun (a
    connection the kernel still queued as it closed is reset instead)."""
    deadline = time.monotonic() + 60 * run.SLOW
    while time.monotonic() < deadline:
        try:
            socket.create_connection((srv.host, srv.port), timeout=5 * run.SLOW).close()
        except ConnectionRefusedError:
            return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError("the listening socket stayed open after SIGTERM")


def exits_zero(srv):
    status = srv.proc.wait(120 * run.SLOW)
    assert status == 0, (status, srv.log()[-3000:])
    assert "Fatal error" not in srv.log(), srv.log()[-3000:]


def storm(srv, answered, stop, bad):
    """One client of the storm: a new connection per request until stop; a
    refused or reset connection is an outcome of the drain, any answer must
    be a whole 200."""
    while not stop.is_set():
        try:
            s = socket.create_connection((srv.host, srv.port), timeout=30 * run.SLOW)
        except OSError:
            time.sleep(0.001)  # refused: the drain closed the socket
            continue
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            status, _, body, _ = run.read_response(s, 30)
            if status != 200 or body != b'{"status":"ok"}':
                bad.append((status, body[:100]))
            answered.release()
        except (OSError, AssertionError):
            pass  # reset or closed unanswered: queued past the limit at the close
        finally:
            s.close()


def test_sigterm_during_a_connection_storm(start):
    """SIGTERM while eight clients open connection after connection: every
    server exits 0.  libmicrohttpd 0.9.75's own drain (MHD_quiesce_daemon)
    raced with its polling threads -- an abort ("Failed to remove listen FD
    from epoll set") -- and a connection handed to it at the drain found a
    polling thread at its limit and deadlocked it (the exit never came):
    the few connections of --max-connections 4 make both likely.  Each
    round signals once its storm has had 100 answers."""
    rounds = [("--http-threads", "2", "--max-connections", "4"),
              ("--http-threads", "4", "--max-connections", "6"),
              ("--http-threads", "4")]
    for i in range(12):
        srv = start("--drain-s", "30", *rounds[i % len(rounds)])
        answered = threading.Semaphore(0)
        stop = threading.Event()
        bad = []
        clients = [threading.Thread(target=storm, args=(srv, answered, stop, bad))
                   for _ in range(8)]
        for t in clients:
            t.start()
        try:
            for _ in range(100):
                assert answered.acquire(timeout=60 * run.SLOW), "the storm got no answers"
            srv.proc.send_signal(signal.SIGTERM)
            exits_zero(srv)
        finally:
            stop.set()
            for t in clients:
                t.join(60 * run.SLOW)
        assert not bad, bad[:5]


def connections(srv, state):
    return srv.metrics()[("attnbias_open_connections", frozenset({("state", state)}))]


def wait_connections(srv, headers, idle):
    """Until the server counts this many connections waiting for a request's
    headers (new ones included) and kept alive idle."""
    deadline = time.monotonic() + 60 * run.SLOW
    while (connections(srv, "headers"), connections(srv, "idle")) != (headers, idle):
        assert time.monotonic() < deadline, (connections(srv, "headers"),
                                             connections(srv, "idle"))
        time.sleep(0.01)


def test_request_sent_to_a_stopped_server_is_answered(start):
    """SIGSTOP, a request sent on a new connection, SIGTERM, SIGCONT: the
    request is answered (200, or 503 with Connection: close), never closed
    unanswered -- whether the connection was made while the server ran
    (accepted, its request unread when the drain began) or while it was
    stopped (still in the kernel's queue).  An idle kept-alive connection
    does not hold the drain up: the server exits with it open, long before
    --drain-s."""
    for i in range(6):
        srv = start("--drain-s", NEVER, "--header-timeout-s", NEVER,
                    "--timeout-s", NEVER)
        idle = srv.connect()
        s = None
        try:
            idle.sendall(GET_HEALTHZ)
            assert run.read_response(idle)[0] == 200
            if i % 2 == 0:
                s = srv.connect()
                wait_connections(srv, headers=1, idle=1)
            os.kill(srv.proc.pid, signal.SIGSTOP)
            try:
                s = s or srv.connect()
                s.sendall(POST_BIAS)
                srv.proc.send_signal(signal.SIGTERM)
            finally:
                os.kill(srv.proc.pid, signal.SIGCONT)
            check_drain_answer(*run.read_response(s, 60)[:3])
            exits_zero(srv)
            # The idle connection was closed, not answered.
            run.expect_closed(idle, 30 * run.SLOW)
        finally:
            idle.close()
            if s:
                s.close()


def test_new_connection_gets_its_answer_during_the_drain(start):
    """A connection accepted before SIGTERM that has not sent a byte yet is
    a client about to ask: the drain waits for its request (up to the
    header deadline) and answers it with a 503 and Connection: close."""
    srv = start("--drain-s", NEVER, "--header-timeout-s", NEVER)
    s = srv.connect()
    try:
        wait_connections(srv, headers=1, idle=0)
        srv.proc.send_signal(signal.SIGTERM)
        wait_refused(srv)
        s.sendall(POST_BIAS)
        problem_503(*run.read_response(s, 60)[:3])
    finally:
        s.close()
    exits_zero(srv)


def test_begun_request_on_a_kept_alive_connection_is_waited_for(start):
    """A kept-alive connection whose next request has begun (its request
    line is in, the headers are not) when the drain begins is answered once
    the headers are complete; one kept alive with nothing sent is not
    waited for."""
    srv = start("--drain-s", NEVER, "--header-timeout-s", NEVER, "--timeout-s", NEVER)
    s = srv.connect()
    idle = srv.connect()
    try:
        for c in (s, idle):
            c.sendall(GET_HEALTHZ)
            assert run.read_response(c)[0] == 200
        s.sendall(b"GET /readyz HTTP/1.1\r\n")
        # The server has read the request line (a byte still unread in the
        # socket would be waited for too, but not seen in this state).
        wait_connections(srv, headers=1, idle=1)
        srv.proc.send_signal(signal.SIGTERM)
        wait_refused(srv)
        s.sendall(b"Host: t\r\n\r\n")
        status, headers, body, _ = run.read_response(s, 60)
        problem_503(status, headers, body)
    finally:
        s.close()
        exits_zero(srv)
        idle.close()


def test_max_connections_keeps_the_rest_queued(start):
    """--max-connections 2: a third connection waits in the kernel's queue
    (the server has 2 open) and is served once one of the two closes."""
    srv = start("--max-connections", "2")
    held = [srv.connect() for _ in range(2)]
    third = None
    try:
        for s in held:
            s.sendall(GET_HEALTHZ)
            assert run.read_response(s)[0] == 200
        third = srv.connect()  # completed by the kernel, not accepted
        third.sendall(GET_HEALTHZ)
        held[0].sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _, text, _ = run.read_response(held[0])
        assert status == 200
        m = run.parse_metrics(text.decode())
        n = {dict(k[1])["state"]: v for k, v in m.items()
             if k[0] == "attnbias_open_connections"}
        # The one asking is busy, the other idle (or still busy, if its
        # answer's completion is not yet counted); the third is not open.
        assert n["headers"] == 0 and sum(n.values()) == 2, n
        held[1].close()
        status, _, body, _ = run.read_response(third, 60)
        assert (status, body) == (200, b'{"status":"ok"}'), (status, body)
    finally:
        for s in held + [third]:
            if s:
                s.close()
