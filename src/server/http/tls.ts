import { X509Certificate } from "node:crypto";
import { readFileSync, unwatchFile, watchFile, type Stats } from "node:fs";
import type net from "node:net";
import tls from "node:tls";
import { Code } from "@connectrpc/connect";
import { ApiError } from "../../domain/errors.js";
import { describeSystemError, StartupError } from "../../startup-error.js";
import { DEFAULT_ERROR_DOMAIN, restErrorBody, toConnectError } from "../errors.js";
import { lingerOnClose, MAX_LINGER_MS } from "./lingering-close.js";

/** Where the server's certificate chain and its private key are (PLATFORM_TLS_CERT_FILE, PLATFORM_TLS_KEY_FILE). */
export interface TlsFiles {
  certFile: string;
  keyFile: string;
}

/** What the logs say about the certificate being served. */
export interface CertificateFacts {
  subject: string;
  serialNumber: string;
  /** The certificate's notAfter, ISO 8601. */
  expires: string;
}

/** Where reload outcomes are told: the server's logger, once it exists. */
export type TlsLog = (level: "info" | "warn", fields: Record<string, unknown>, msg: string) => void;

/** The certificate being served, re-read on demand and when its files change. */
export interface TlsTermination {
  /**
   * Re-reads both files. A pair that loads and matches replaces the served
   * one for new handshakes (established connections keep theirs) and is
   * logged at info; anything else keeps the old one and is logged at warn.
   */
  reload(trigger: string): boolean;
  /**
   * A connection handler for the front listener: runs the server side of
   * the handshake on each socket (ALPN h2 or http/1.1, TLS 1.2 at least) and
   * passes the secured socket to onSecure. A handshake that fails or takes
   * over handshakeTimeoutMs destroys its socket.
   */
  handler(onSecure: (socket: tls.TLSSocket) => void, handshakeTimeoutMs: number): (socket: net.Socket) => void;
  /** Stops watching the files. */
  close(): void;
}

/** The versions and protocols every handshake offers. */
const PROTOCOL_OPTIONS = { minVersion: "TLSv1.2", ALPNProtocols: ["h2", "http/1.1"] } satisfies tls.TlsOptions;

/** How often the files' status is polled: renames and symbolic links (certbot's live/) are seen, unlike inotify on a file. */
const WATCH_INTERVAL_MS = 1_000;
/** A change is acted on once both files have been quiet this long, so a cert and key replaced one after the other load as a pair. */
const SETTLE_MS = 1_500;

interface LoadedPair {
  options: tls.SecureContextOptions;
  facts: CertificateFacts;
}

/** Reads and checks the pair; throws an Error whose message is one line naming the file and the cause. */
function loadPair(files: TlsFiles): LoadedPair {
  const read = (name: string, path: string) => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new Error(`cannot read ${name} ${path}: ${describeSystemError(err)}`, { cause: err });
    }
  };
  const cert = read("PLATFORM_TLS_CERT_FILE", files.certFile);
  const key = read("PLATFORM_TLS_KEY_FILE", files.keyFile);
  const options = { cert, key, ...PROTOCOL_OPTIONS };
  let leaf: X509Certificate;
  try {
    // Validates the key and that it is the certificate's ("key values mismatch" otherwise).
    tls.createSecureContext(options);
    leaf = new X509Certificate(cert);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new Error(`TLS certificate ${files.certFile} with key ${files.keyFile} is unusable: ${reason}`, { cause: err });
  }
  return {
    options,
    facts: { subject: leaf.subject.replace(/\n/g, ", "), serialNumber: leaf.serialNumber, expires: new Date(leaf.validTo).toISOString() },
  };
}

/** loadPair at start-up, where a bad pair is the operator's to fix: one line, exit 2. */
function loadAtStart(files: TlsFiles): LoadedPair {
  try {
    return loadPair(files);
  } catch (err) {
    throw new StartupError((err as Error).message);
  }
}

/** Reads and checks the pair as a start would, without serving it (a primary process checks once for its workers). */
export function checkTlsFiles(files: TlsFiles): CertificateFacts {
  return loadAtStart(files).facts;
}

/**
 * Loads the certificate and key and starts watching both files. A missing,
 * unreadable or mismatched pair at start-up is a StartupError (one line,
 * exit 2); later, a bad pair only keeps the current one (see reload).
 */
export function createTlsTermination(files: TlsFiles, log: TlsLog): TlsTermination {
  let current = loadAtStart(files);
  const servers = new Set<tls.Server>();
  const reload = (trigger: string): boolean => {
    let next: LoadedPair;
    try {
      next = loadPair(files);
    } catch (err) {
      log(
        "warn",
        { trigger, err: (err as Error).message, serving: current.facts },
        "TLS certificate not reloaded; still serving the previous one",
      );
      return false;
    }
    current = next;
    for (const server of servers) server.setSecureContext(current.options);
    log("info", { trigger, ...current.facts }, "TLS certificate reloaded");
    return true;
  };

  let settle: NodeJS.Timeout | undefined;
  const changed = (now: Stats, before: Stats) => {
    if (now.mtimeMs === before.mtimeMs && now.ino === before.ino && now.size === before.size) return;
    clearTimeout(settle);
    settle = setTimeout(() => reload("file change"), SETTLE_MS).unref();
  };
  for (const file of [files.certFile, files.keyFile]) watchFile(file, { interval: WATCH_INTERVAL_MS, persistent: false }, changed);

  return {
    reload,
    handler(onSecure, handshakeTimeoutMs) {
      // A tls.Server that never listens: it runs handshakes on the sockets the front listener gives it.
      const server = tls.createServer({ ...current.options, handshakeTimeout: handshakeTimeoutMs });
      servers.add(server);
      server.on("secureConnection", onSecure);
      // A failed handshake (plaintext, TLS 1.1, a client that does not trust us) is the client's problem, not a log line.
      server.on("tlsClientError", (_err, socket) => socket.destroy());
      return (socket) => server.emit("connection", socket);
    },
    close() {
      clearTimeout(settle);
      for (const file of [files.certFile, files.keyFile]) unwatchFile(file, changed);
    },
  };
}

/** True when a connection's first byte starts a TLS handshake record. */
export const isTlsHandshake = (firstBytes: Buffer): boolean => firstBytes[0] === 0x16;

/**
 * Plaintext sent to the TLS port: an HTTP/1.x request gets a 400 in the
 * spec's error shape saying to use https (an HTTP/2 preface cannot be
 * answered in kind and is closed), so a proxy configured for an http://
 * upstream shows the operator what is wrong instead of an empty reply.
 */
export function refusePlaintext(socket: net.Socket, http2: boolean): void {
  if (http2) {
    socket.destroy();
    return;
  }
  const err = new ApiError(Code.InvalidArgument, "TLS_REQUIRED", "This port serves TLS: use https://");
  const body = `${JSON.stringify(restErrorBody(toConnectError(err, DEFAULT_ERROR_DOMAIN)).body)}\n`;
  // Closing with the request unread would reset the connection and lose the answer: a lingering close reads and drops it.
  lingerOnClose(socket, MAX_LINGER_MS);
  socket.write(
    `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
  socket.destroySoon();
}
