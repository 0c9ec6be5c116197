import http from "node:http";

/** A response read whole. */
export interface RawResponse {
  status: number;
  text: string;
  headers: http.IncomingHttpHeaders;
}

/**
 * An HTTP/1.1 request sent from a chosen local address, e.g. 127.0.0.42 (all
 * of 127.0.0.0/8 is loopback on Linux): per-address limits see each such
 * address as another client.
 */
export function requestFrom(
  localAddress: string,
  url: string,
  init: { method: string; headers?: Record<string, string>; body?: string },
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: init.method, headers: init.headers, localAddress, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8"), headers: res.headers }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(init.body);
  });
}
