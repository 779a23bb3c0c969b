#!/usr/bin/env python3
"""A minimal SIP user agent over UDP for tests/lab/helpers.sh: one INVITE with SDP, its 200 OK
with SDP, then one "RTP" datagram each way to the media address and port the other side's SDP
named (rewritten by the router's SIP helper under NAT). Exit status 0 when both datagrams
arrived and each SIP message's Content-Length matched its body, 1 otherwise; the SIP messages
received are printed for the log.

  sip_ua.py server ADDR MEDIA_PORT            answers one INVITE on ADDR:5060
  sip_ua.py client ADDR MEDIA_PORT SERVER     calls SERVER:5060 from ADDR:5060

The client's media socket is bound to ADDR:MEDIA_PORT and its SDP says so (c=IN IP4 ADDR,
m=audio MEDIA_PORT); the server's likewise. The server sends its datagram to what the INVITE's
SDP says, from its media socket, and waits for the client's; the client waits for the server's,
then sends its own to what the 200 OK's SDP says. Every wait is bounded (TIMEOUT seconds).
"""
import re
import socket
import sys
import time

TIMEOUT = 5.0
SIP_PORT = 5060


def sdp(addr, port):
    return (
        "v=0\r\n"
        f"o=weirhl 1 1 IN IP4 {addr}\r\n"
        "s=weir helper lab\r\n"
        f"c=IN IP4 {addr}\r\n"
        "t=0 0\r\n"
        f"m=audio {port} RTP/AVP 0\r\n"
        "a=rtpmap:0 PCMU/8000\r\n"
    )


def message(first, headers, body):
    h = "".join(f"{k}: {v}\r\n" for k, v in headers)
    return (
        f"{first}\r\n{h}Content-Type: application/sdp\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


def media_of(msg):
    """(address, port) of the SDP's c= and m=audio lines."""
    text = msg.decode(errors="replace")
    c = re.search(r"^c=IN IP4 ([0-9.]+)", text, re.M)
    m = re.search(r"^m=audio (\d+) ", text, re.M)
    if not c or not m:
        raise SystemExit(f"no c= or m=audio line in:\n{text}")
    return c.group(1), int(m.group(1))


def length_ok(msg):
    """Content-Length equals the body's length (a router that rewrites the SDP to an address of
    another length must correct it)."""
    head, _, body = msg.partition(b"\r\n\r\n")
    m = re.search(rb"^(?:Content-Length|l)\s*:\s*(\d+)", head, re.M | re.I)
    if not m or int(m.group(1)) != len(body):
        print(f"Content-Length {m.group(1).decode() if m else None} but a body of {len(body)} bytes", flush=True)
        return False
    return True


def recv(sock, what):
    sock.settimeout(TIMEOUT)
    try:
        return sock.recvfrom(65535)
    except socket.timeout:
        print(f"timeout waiting for {what}", flush=True)
        sys.exit(1)


def udp(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    return s


def server(addr, media_port):
    sig, media = udp(addr, SIP_PORT), udp(addr, media_port)
    invite, peer = recv(sig, "the INVITE")
    print(f"server got from {peer[0]}:{peer[1]}:\n{invite.decode(errors='replace')}", flush=True)
    if not invite.startswith(b"INVITE "):
        print("not an INVITE", flush=True)
        return 1
    if not length_ok(invite):
        return 1
    heads = dict(
        (k.lower(), v.strip())
        for k, v in (
            line.split(":", 1)
            for line in invite.decode(errors="replace").split("\r\n\r\n")[0].split("\r\n")[1:]
            if ":" in line
        )
    )
    ok = message(
        "SIP/2.0 200 OK",
        [
            ("Via", heads.get("via", "")),
            ("From", heads.get("from", "")),
            ("To", heads.get("to", "") + ";tag=srv1"),
            ("Call-ID", heads.get("call-id", "")),
            ("CSeq", heads.get("cseq", "")),
            ("Contact", f"<sip:server@{addr}:{SIP_PORT}>"),
        ],
        sdp(addr, media_port),
    )
    sig.sendto(ok, peer)
    dst = media_of(invite)
    print(f"server: INVITE's SDP names {dst[0]}:{dst[1]}; sending RTP there", flush=True)
    # the client's media socket is bound before it sends the INVITE: one datagram is enough
    media.sendto(b"RTP from server", dst)
    data, src = recv(media, "the client's RTP")
    print(f"server: RTP {data!r} from {src[0]}:{src[1]}", flush=True)
    return 0 if data == b"RTP from client" else 1


def client(addr, media_port, server_addr):
    sig, media = udp(addr, SIP_PORT), udp(addr, media_port)
    invite = message(
        f"INVITE sip:server@{server_addr} SIP/2.0",
        [
            ("Via", f"SIP/2.0/UDP {addr}:{SIP_PORT};branch=z9hG4bKweirhl1"),
            ("Max-Forwards", "70"),
            ("From", f"<sip:client@{addr}>;tag=cli1"),
            ("To", f"<sip:server@{server_addr}>"),
            ("Call-ID", f"weirhl-{time.time_ns()}@{addr}"),
            ("CSeq", "1 INVITE"),
            ("Contact", f"<sip:client@{addr}:{SIP_PORT}>"),
        ],
        sdp(addr, media_port),
    )
    sig.sendto(invite, (server_addr, SIP_PORT))
    ok, peer = recv(sig, "the 200 OK")
    print(f"client got from {peer[0]}:{peer[1]}:\n{ok.decode(errors='replace')}", flush=True)
    if not ok.startswith(b"SIP/2.0 200 "):
        print("not a 200 OK", flush=True)
        return 1
    if not length_ok(ok):
        return 1
    data, src = recv(media, "the server's RTP")
    print(f"client: RTP {data!r} from {src[0]}:{src[1]}", flush=True)
    if data != b"RTP from server":
        return 1
    dst = media_of(ok)
    print(f"client: 200 OK's SDP names {dst[0]}:{dst[1]}; sending RTP there", flush=True)
    media.sendto(b"RTP from client", dst)
    return 0


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "server":
        sys.exit(server(sys.argv[2], int(sys.argv[3])))
    sys.exit(client(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
