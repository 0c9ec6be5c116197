import type { FastifyServerOptions } from "fastify";

/** Headers and fields that carry secrets: never written to a log line. */
export const REDACTED = ["req.headers.authorization", "req.headers.cookie", 'req.headers["proxy-authorization"]', "headers.authorization"];

/**
 * pino options: JSON lines at LOG_LEVEL, secrets redacted; human-readable
 * (pino-pretty) when stdout is a terminal; or into a given stream (tests).
 */
export function loggerOptions(level: string, stream?: NodeJS.WritableStream): FastifyServerOptions["logger"] {
  const base = { level, redact: { paths: REDACTED, censor: "[redacted]" } };
  if (stream) return { ...base, stream };
  if (process.stdout.isTTY) return { ...base, transport: { target: "pino-pretty", options: { translateTime: "SYS:HH:MM:ss.l" } } };
  return base;
}
