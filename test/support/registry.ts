/**
 * A real registry for tests: Debian's docker-registry (CNCF Distribution
 * 2.8) on loopback, configured with docs/registry/registry.yml (the file
 * docs/registry.md shows, its placeholders filled here) so its token auth
 * points at a test server's /registry/token and its notifications at
 * /registry/notifications; and the client side, a tiny OCI image made with
 * umoci and pushed, pulled and deleted with skopeo, as users do.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { platformCli } from "./platform-cli.js";
import { startTestServer, type TestServer } from "./server.js";

const TEMPLATE = fileURLToPath(new URL("../../docs/registry/registry.yml", import.meta.url));
/** The registry's service and issuer in the tests (the server is started with the same values). */
export const REGISTRY_SERVICE = "registry.test";
export const REGISTRY_ISSUER = "http://issuer.test/registry";
/** The secret the registry's notifications carry (PLATFORM_REGISTRY_NOTIFY_SECRET). */
export const REGISTRY_NOTIFY_SECRET = "registry-notify-secret-for-tests";
/** The environment a test server needs for the registry below. */
export const REGISTRY_SERVER_ENV: Record<string, string> = {
  PLATFORM_REGISTRY_SERVICE: REGISTRY_SERVICE,
  PLATFORM_REGISTRY_ISSUER: REGISTRY_ISSUER,
  PLATFORM_REGISTRY_NOTIFY_SECRET: REGISTRY_NOTIFY_SECRET,
};
/** How long the registry may take to start on a loaded machine. */
const START_TIMEOUT_MS = 60_000;

/** A running registry. */
export interface TestRegistry {
  /** host:port, as image references name it. */
  addr: string;
  /** Everything the registry logged so far (for a failing test's message). */
  logs(): string;
  close(): Promise<void>;
}

/** A free loopback port (the registry takes no port 0). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** docs/registry/registry.yml with its ${…} placeholders filled; every placeholder must be given. */
export function renderRegistryConfig(values: Record<string, string>): string {
  return readFileSync(TEMPLATE, "utf8").replace(/\$\{([A-Z_]+)\}/g, (_m, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`registry.yml placeholder ${name} has no value`);
    return value;
  });
}

/**
 * Starts docker-registry for the test server: the bundle is
 * `platform-api registry-bundle`'s output over the server's storage. Resolves
 * once the registry answers /v2/ (with its 401 challenge).
 */
export async function startRegistry(srv: TestServer): Promise<TestRegistry> {
  const dir = mkdtempSync(join(tmpdir(), "registry-test-"));
  const bundle = await platformCli(srv, ["registry-bundle"], REGISTRY_SERVER_ENV);
  if (bundle.code !== 0) throw new Error(`registry-bundle exited ${bundle.code}: ${bundle.stderr}`);
  writeFileSync(join(dir, "bundle.pem"), bundle.stdout);
  const addr = `127.0.0.1:${await freePort()}`;
  const config = renderRegistryConfig({
    STORAGE_DIR: join(dir, "storage"),
    LISTEN_ADDR: addr,
    PLATFORM_URL: srv.url,
    PLATFORM_REGISTRY_SERVICE: REGISTRY_SERVICE,
    PLATFORM_REGISTRY_ISSUER: REGISTRY_ISSUER,
    BUNDLE_FILE: join(dir, "bundle.pem"),
    PLATFORM_REGISTRY_NOTIFY_SECRET: REGISTRY_NOTIFY_SECRET,
  });
  writeFileSync(join(dir, "config.yml"), config);
  // Its own environment only: Distribution reads REGISTRY_* variables as configuration.
  const child: ChildProcess = spawn("docker-registry", ["serve", join(dir, "config.yml")], {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  const close = async () => {
    if (child.exitCode === null) child.kill("SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    const status = await fetch(`http://${addr}/v2/`).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 401) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      await close();
      throw new Error(`docker-registry did not start (answer ${status}):\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { addr, logs: () => output, close };
}

/** What a client command printed and how it exited. */
export interface ClientRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a client (skopeo, umoci) to completion. */
function run(command: string, args: readonly string[]): Promise<ClientRun> {
  return new Promise((resolve) => {
    execFile(command, args, { timeout: 120_000, env: { ...process.env, HOME: tmpdir() } }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** A tiny OCI image (an empty rootfs) in a fresh OCI layout, tagged tag: the source of pushes. */
export async function makeImage(tag = "v1"): Promise<{ layout: string; ref: string; remove(): void }> {
  const dir = mkdtempSync(join(tmpdir(), "oci-image-"));
  const layout = join(dir, "img");
  for (const args of [
    ["init", "--layout", layout],
    ["new", "--image", `${layout}:${tag}`],
  ]) {
    const r = await run("umoci", args);
    if (r.code !== 0) throw new Error(`umoci ${args.join(" ")} failed: ${r.stderr}`);
  }
  return { layout, ref: `oci:${layout}:${tag}`, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** An image made by makeImage. */
export type TestImage = Awaited<ReturnType<typeof makeImage>>;

/** A test server for the registry, the registry in front of it, and an image to push. */
export interface RegistryWorld {
  srv: TestServer;
  /** The registry running now (restartRegistry replaces it). */
  registry: TestRegistry;
  image: TestImage;
  /** Stops the registry and starts another for the server (it reads the server's key bundle at start). */
  restartRegistry(): Promise<TestRegistry>;
  close(): Promise<void>;
}

/** Starts a test server with REGISTRY_SERVER_ENV and env, then a registry for it, and makes an image tagged v1. */
export async function startRegistryWorld(env: Record<string, string> = {}): Promise<RegistryWorld> {
  const srv = await startTestServer({ env: { ...REGISTRY_SERVER_ENV, ...env } });
  let registry: TestRegistry | undefined;
  try {
    registry = await startRegistry(srv);
    const image = await makeImage("v1");
    const world: RegistryWorld = {
      srv,
      registry,
      image,
      async restartRegistry() {
        await world.registry.close();
        world.registry = await startRegistry(srv);
        return world.registry;
      },
      async close() {
        image.remove();
        await world.registry.close();
        await srv.close();
      },
    };
    return world;
  } catch (err) {
    await registry?.close();
    await srv.close();
    throw err;
  }
}

/** Registry credentials as skopeo takes them: user _token and an API token, or an identity uid and its OIDC token. */
export interface Credentials {
  user: string;
  password: string;
}

const creds = (c: Credentials) => `${c.user}:${c.password}`;

/** Pushes the image at source (an oci: reference) to docker://<addr>/<path>. */
export function pushImage(registry: TestRegistry, source: string, path: string, c: Credentials): Promise<ClientRun> {
  return run("skopeo", [
    "--insecure-policy",
    "copy",
    "--dest-tls-verify=false",
    "--dest-creds",
    creds(c),
    source,
    `docker://${registry.addr}/${path}`,
  ]);
}

/** Pulls docker://<addr>/<path> (manifest and blobs) into a throwaway OCI layout. */
export async function pullImage(registry: TestRegistry, path: string, c: Credentials): Promise<ClientRun> {
  const dir = mkdtempSync(join(tmpdir(), "oci-pull-"));
  try {
    return await run("skopeo", [
      "--insecure-policy",
      "copy",
      "--src-tls-verify=false",
      "--src-creds",
      creds(c),
      `docker://${registry.addr}/${path}`,
      `oci:${join(dir, "img")}:pulled`,
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Deletes the manifest docker://<addr>/<path> names (by tag: skopeo resolves it to its digest). */
export function deleteImage(registry: TestRegistry, path: string, c: Credentials): Promise<ClientRun> {
  return run("skopeo", ["delete", "--tls-verify=false", "--creds", creds(c), `docker://${registry.addr}/${path}`]);
}

/** The digest of the manifest docker://<addr>/<path> names, as the registry serves it. */
export async function manifestDigest(registry: TestRegistry, path: string, c: Credentials): Promise<string> {
  const r = await run("skopeo", [
    "inspect",
    "--tls-verify=false",
    "--creds",
    creds(c),
    "--format",
    "{{.Digest}}",
    `docker://${registry.addr}/${path}`,
  ]);
  if (r.code !== 0) throw new Error(`skopeo inspect ${path} failed: ${r.stderr}`);
  return r.stdout.trim();
}
