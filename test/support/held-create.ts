import { once } from "node:events";
import http from "node:http";

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
