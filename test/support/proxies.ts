import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import { userInfo } from "node:os";
import { join } from "node:path";
import type { TestCa } from "./test-ca.js";

/** The front proxies docs/deploy/ has a tested config for. */
export type ProxyKind = "nginx" | "haproxy" | "caddy";

/** The very files operators copy, read by the tests as they are. */
export const DEPLOY_CONFIGS: Record<ProxyKind, string> = {
  nginx: new URL("../../docs/deploy/nginx.conf", import.meta.url).pathname,
  haproxy: new URL("../../docs/deploy/haproxy.cfg", import.meta.url).pathname,
  caddy: new URL("../../docs/deploy/Caddyfile", import.meta.url).pathname,
};

/** Where Debian's packages put each binary (nginx and haproxy live in /usr/sbin, often not on a user's PATH). */
const BINARIES: Record<ProxyKind, string[]> = {
  nginx: ["/usr/sbin/nginx", "nginx"],
  haproxy: ["/usr/sbin/haproxy", "haproxy"],
  caddy: ["/usr/bin/caddy", "caddy"],
};

/** The proxy's executable, or null when it is not installed. */
export function proxyBinary(kind: ProxyKind): string | null {
  for (const candidate of BINARIES[kind]) {
    const probe = spawnSync(candidate, kind === "caddy" ? ["version"] : ["-v"], { stdio: "ignore" });
    if (!probe.error) return candidate;
  }
  return null;
}

/**
 * The `skip` option of a proxy's suite: a reason when the binary is absent on a
 * developer's machine, false when it is present. Under CI=true an absent binary
 * throws, so a CI that forgot to install the package fails instead of passing
 * a suite it never ran.
 */
export function skipUnlessInstalled(kind: ProxyKind): string | false {
  return proxyBinary(kind) ? false : skipOutsideCi([kind]);
}

/**
 * The `skip` option of a suite whose Debian packages `missing` are not installed: a reason on a developer's
 * machine; under CI=true it throws, so a CI that forgot to install one fails instead of passing a suite it never ran.
 */
export function skipOutsideCi(missing: readonly string[]): string {
  const why = `${missing.join(", ")} not installed (Debian: apt-get install ${missing.join(" ")})`;
  if (process.env.CI === "true") throw new Error(`${why}; CI must install it (see .ci/run)`);
  return `${why}: skipped outside CI`;
}

/** A proxy running on loopback with its docs/deploy/ config, TLS in front. */
export interface RunningProxy {
  kind: ProxyKind;
  /** The TLS port on 127.0.0.1. */
  port: number;
  /** https://127.0.0.1:<port> (the test certificate names 127.0.0.1, so no SNI is needed). */
  url: string;
  /** Everything the proxy wrote to stdout and stderr so far. */
  output(): string;
  /** Stops the proxy and waits for it to exit. */
  stop(): Promise<void>;
}

/** A free TCP port on 127.0.0.1 (the kernel's pick, released for the proxy to bind). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as net.AddressInfo;
  server.close();
  await once(server, "close");
  return port;
}

/**
 * Fills nginx's config: nginx reads no environment, so the deploy file names
 * ${PLATFORM_UPSTREAM}, ${PROXY_LISTEN}, ${TLS_CERT_FILE} and ${TLS_KEY_FILE}
 * (what `envsubst` with those names does for operators), and nothing else in
 * it is touched: nginx's own $variables stay as they are.
 */
export function substituteNginx(text: string, values: Record<string, string>): string {
  const out = text.replace(/\$\{([A-Z_]+)\}/g, (whole, name: string) => values[name] ?? whole);
  const left = /\$\{[A-Z_]+\}/.exec(out);
  if (left) throw new Error(`nginx.conf names ${left[0]}, which the test does not fill`);
  return out;
}

/**
 * The main nginx.conf around the deploy file, like Debian's /etc/nginx/nginx.conf
 * (which includes conf.d/*.conf inside http {}), with its pid, logs and
 * temporary files in dir so nginx runs as the current user.
 */
function nginxMainConfig(dir: string, include: string): string {
  const asRoot = process.getuid?.() === 0;
  return [
    // Run as root, nginx would switch its workers to "nobody", who cannot enter the test's private dir.
    asRoot ? `user ${userInfo().username};` : "",
    "worker_processes 1;",
    `pid ${join(dir, "nginx.pid")};`,
    `error_log ${join(dir, "error.log")} notice;`,
    "events { worker_connections 512; }",
    "http {",
    ...["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map((t) => `  ${t}_temp_path ${join(dir, t)};`),
    `  access_log ${join(dir, "access.log")};`,
    `  include ${include};`,
    "}",
    "",
  ].join("\n");
}

/**
 * How to run one proxy: command, arguments and environment. HAProxy's file has
 * two server lines: the second gets secondUpstreamPort, or the same server.
 */
function commandFor(kind: ProxyKind, dir: string, port: number, upstreamPort: number, ca: TestCa, secondUpstreamPort = upstreamPort) {
  const upstream = `127.0.0.1:${upstreamPort}`;
  if (kind === "nginx") {
    const site = join(dir, "platform-api.conf");
    writeFileSync(
      site,
      substituteNginx(readFileSync(DEPLOY_CONFIGS.nginx, "utf8"), {
        PLATFORM_UPSTREAM: upstream,
        PROXY_LISTEN: `127.0.0.1:${port}`,
        TLS_CERT_FILE: ca.certFile,
        TLS_KEY_FILE: ca.keyFile,
      }),
    );
    const main = join(dir, "nginx.conf");
    writeFileSync(main, nginxMainConfig(dir, site));
    return { args: ["-p", dir, "-c", main, "-e", join(dir, "error.log"), "-g", "daemon off;"], env: {} };
  }
  if (kind === "haproxy") {
    const env = {
      PLATFORM_UPSTREAM: upstream,
      PLATFORM_UPSTREAM_2: `127.0.0.1:${secondUpstreamPort}`,
      PROXY_LISTEN: `127.0.0.1:${port}`,
      TLS_PEM_FILE: ca.pemBundleFile,
    };
    return { args: ["-db", "-f", DEPLOY_CONFIGS.haproxy], env };
  }
  const env = {
    PLATFORM_UPSTREAM: upstream,
    PROXY_SITE: `:${port}`,
    PROXY_BIND: "127.0.0.1",
    TLS_CERT_FILE: ca.certFile,
    TLS_KEY_FILE: ca.keyFile,
    CADDY_ADMIN: "off",
    // Caddy keeps its state (autosave.json, certificates) under these.
    HOME: dir,
    XDG_DATA_HOME: join(dir, "data"),
    XDG_CONFIG_HOME: join(dir, "config"),
  };
  return { args: ["run", "--config", DEPLOY_CONFIGS.caddy, "--adapter", "caddyfile"], env };
}

/** Resolves once something accepts TCP connections on 127.0.0.1:port; rejects if the child exits first. */
async function acceptingConnections(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const exited = once(child, "exit").then(([code]) => {
    throw new Error(`the proxy exited (${String(code)}) before listening:\n${output()}`);
  });
  // Each attempt waits on a connect or a refusal; the bound only ends a proxy that never listens.
  for (let attempt = 0; attempt < 600; attempt++) {
    const connected = await Promise.race([
      new Promise<boolean>((resolve) => {
        const socket = net.connect(port, "127.0.0.1");
        socket.once("connect", () => (socket.destroy(), resolve(true)));
        socket.once("error", () => resolve(false));
      }),
      exited,
    ]);
    if (connected) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`the proxy never listened on ${port}:\n${output()}`);
}

/**
 * Starts kind on 127.0.0.1 with its docs/deploy/ config, forwarding to
 * 127.0.0.1:upstreamPort (and HAProxy's second server line to
 * secondUpstreamPort, by default the same), TLS with the test CA's localhost
 * certificate. Only ports and paths are filled in (environment variables for
 * HAProxy and Caddy, the documented substitution for nginx); pid, logs and
 * state go to dir. Resolves when it accepts connections.
 */
export async function startProxy(
  kind: ProxyKind,
  opts: { dir: string; upstreamPort: number; secondUpstreamPort?: number; ca: TestCa },
): Promise<RunningProxy> {
  const binary = proxyBinary(kind);
  if (!binary) throw new Error(`${kind} is not installed`);
  const dir = join(opts.dir, kind);
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const { args, env } = commandFor(kind, dir, port, opts.upstreamPort, opts.ca, opts.secondUpstreamPort);
  const child = spawn(binary, args, { cwd: dir, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let text = "";
  child.stdout!.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
  child.stderr!.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
  const output = () => (kind === "nginx" ? text + readIfExists(join(dir, "error.log")) : text);
  const exit = once(child, "exit");
  try {
    await acceptingConnections(port, child, output);
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
  return {
    kind,
    port,
    url: `https://127.0.0.1:${port}`,
    output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      // A fast stop for all three (nginx and HAProxy: SIGTERM; Caddy: graceful, clients are closed by then).
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exit;
      clearTimeout(killer);
    },
  };
}

function readIfExists(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/**
 * The idle timeouts, in ms, after which each proxy closes a kept-alive
 * connection to the server, as its docs/deploy/ file sets them: nginx's
 * keepalive_timeout in every upstream block, HAProxy's timeout server,
 * Caddy's transport keepalive. Throws when the file sets none (the proxy's
 * built-in default would then apply, unseen).
 */
export function upstreamIdleTimeoutsMs(kind: ProxyKind): number[] {
  const text = readFileSync(DEPLOY_CONFIGS[kind], "utf8").replace(/#.*$/gm, "");
  const seconds = (re: RegExp, within: string) => [...within.matchAll(re)].map((m) => Number(m[1]) * 1000);
  let found: number[];
  if (kind === "nginx") {
    const blocks = [...text.matchAll(/^upstream\s+\w+\s*\{[\s\S]*?^\}/gm)].map((m) => m[0]);
    found = blocks.flatMap((b) => {
      const t = seconds(/keepalive_timeout\s+(\d+)s;/g, b);
      if (t.length !== 1) throw new Error(`an nginx upstream block sets keepalive_timeout ${t.length} times:\n${b}`);
      return t;
    });
  } else if (kind === "haproxy") {
    found = seconds(/timeout\s+server\s+(\d+)s/g, text);
  } else {
    found = seconds(/keepalive\s+(\d+)s/g, text);
  }
  if (found.length === 0) throw new Error(`${DEPLOY_CONFIGS[kind]} sets no idle timeout toward the server`);
  return found;
}
