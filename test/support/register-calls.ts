import { create, toBinary } from "@bufbuild/protobuf";
import { AuthService, RegisterRequestSchema } from "../../gen/platformapi/auth/v1/auth_pb.js";
import { frame } from "./grpc-web-frames.js";
import { grpcFrom, http1From, type LogLines, type Origin } from "./proxied-calls.js";

/** The four protocols a Register call is made over. */
export const PROTOCOLS = ["rest", "connect", "grpc-web", "grpc"] as const;
export type Protocol = (typeof PROTOCOLS)[number];

const PATH = `/${AuthService.typeName}/Register`;
let sequence = 0;

/**
 * Redeems an invite code with AuthService.Register over protocol, from
 * origin, with extra headers (forwarding headers, say), and returns the
 * server's "rpc" log line of that call: its code and the remoteAddress the
 * server decided on. A wrong code is a failure the invite limiter counts.
 */
export async function registerFrom(
  logs: LogLines,
  protocol: Protocol,
  origin: Origin,
  token: string,
  code: string,
  headers: Record<string, string> = {},
): Promise<{ code: unknown; remoteAddress: unknown }> {
  const reqId = `register-${process.pid}-${++sequence}`;
  const common = { authorization: `Bearer ${token}`, "x-request-id": reqId, ...headers };
  const message = toBinary(RegisterRequestSchema, create(RegisterRequestSchema, { code }));
  if (protocol === "rest")
    await http1From(origin, "POST", "/auth/v1/register", { ...common, "content-type": "application/json" }, JSON.stringify({ code }));
  if (protocol === "connect")
    await http1From(origin, "POST", PATH, { ...common, "content-type": "application/json" }, JSON.stringify({ code }));
  if (protocol === "grpc-web")
    await http1From(origin, "POST", PATH, { ...common, "content-type": "application/grpc-web+proto" }, frame(0, message));
  if (protocol === "grpc") await grpcFrom(origin, PATH, common, message);
  const line = await logs.rpc(reqId);
  return { code: line.code, remoteAddress: line.remoteAddress };
}

/** An invite code of the right form that no invite has: a failure the limiter counts. */
export function wrongInviteCode(): string {
  const hex = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex}.${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url")}`;
}
