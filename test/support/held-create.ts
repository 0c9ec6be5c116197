import { once } from "node:events";
import http from "node:http";
import { create } from "@bufbuild/protobuf";
import { GroupSchema } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import type { UnaryHandler } from "../../src/server/wrap.js";
import { deferred } from "./assertions.js";

/** What a held REST create answers once sent: status, body and its Connection header. */
export interface HeldAnswer {
  status: number;
  body: string;
  connection?: string;
}

/**
 * A REST create held in flight, on its own connection: its headers (with
 * Expect: 100-continue) are in, the server has routed it and said
 * "100 Continue", and its body waits for send(). A request begun before a
 * close, or many calls in flight at once.
 */
export async function heldRestCreate(port: number, token: string, name: string) {
  const body = JSON.stringify({ name });
  const req = http.request({
    host: "127.0.0.1",
    port,
    method: "POST",
    path: "/iam/v2beta1/groups",
    agent: false,
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      expect: "100-continue",
    },
  });
  const response = new Promise<HeldAnswer>((resolve, reject) => {
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8").on("data", (s: string) => (text += s));
      res.on("end", () => resolve({ status: res.statusCode!, body: text, connection: res.headers.connection }));
      res.on("error", reject);
    });
    req.on("error", reject);
  });
  response.catch(() => {}); // examined by the test
  req.flushHeaders();
  await once(req, "continue");
  return { send: () => req.end(body), response };
}

/**
 * A GetGroup handler that records each call's ctx.signal by the uid asked for and answers a group of that uid,
 * holding the call for "slow" (slowStarted settles once it is in) until release(): whether a handler's signal
 * aborts, and when.
 */
export function signalProbe() {
  const signals = new Map<string, AbortSignal>();
  const slow = deferred();
  const gate = deferred();
  const getGroup: UnaryHandler = async (request, ctx) => {
    const uid = (request as { uid: string }).uid;
    signals.set(uid, ctx.signal);
    if (uid === "slow") {
      slow.resolve();
      await gate.promise;
    }
    return create(GroupSchema, { uid, name: "probe" });
  };
  return { signals, getGroup, slowStarted: slow.promise, release: gate.resolve };
}
