/**
 * The command line loads what a command needs and no more (issue 24: `--version` took 1.1–2.5 s because every
 * command imported the server): `--version`, `--help`, `keygen`, `sign-jwt`, `admin-token` and `serve --help`
 * never load the server (src/app/start.ts, fastify, grpc-js); `--version` and `--help` load no package at
 * all, and neither does `auth token` with a valid token stored (what scripts run before every call). The
 * compiled command runs as users run it, with a module-resolution hook (node:module's register) that writes
 * down every module the process resolves; `serve` itself is the control that the hook sees the
 * server when it is loaded. How long the commands take is measured by bench/cli-start.ts, not here.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { platformCli } from "../support/platform-cli.js";
import { startTestServer, type TestServer } from "../support/server.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const DIST = pathToFileURL(join(ROOT, "dist", "src")).href;
const dir = mkdtempSync(join(tmpdir(), "platform-cli-load-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** What loading the server means: its composition root, the HTTP framework, the gRPC server. */
const SERVER_MODULES = [`${DIST}/app/start.js`, "/node_modules/fastify/", "/node_modules/@grpc/grpc-js/"];

// The hook runs on the loader's own thread: it appends each resolved URL to the file named by PLATFORM_LOAD_LOG.
const hooks = join(dir, "hooks.mjs");
writeFileSync(
  hooks,
  `import { appendFileSync } from "node:fs";
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  appendFileSync(process.env.PLATFORM_LOAD_LOG, resolved.url + "\\n");
  return resolved;
}
`,
);
const register = join(dir, "register.mjs");
writeFileSync(register, `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);

let runs = 0;
/** Runs bin/platform-api.js with args from the scratch directory (env may name its data); its exit code, output and every module URL it resolved. */
async function loaded(args: string[], env: Record<string, string>): Promise<{ code: number; stderr: string; modules: string[] }> {
  const log = join(dir, `loaded-${++runs}.txt`);
  writeFileSync(log, "");
  const run = await platformCli(
    join(dir, "unused"),
    args,
    { ...env, PLATFORM_LOAD_LOG: log },
    {
      nodeArgs: ["--import", pathToFileURL(register).href],
      cwd: dir,
    },
  );
  return { code: run.code, stderr: run.stderr, modules: readFileSync(log, "utf8").split("\n").filter(Boolean) };
}

const serverModulesIn = (modules: string[]) => modules.filter((url) => SERVER_MODULES.some((m) => url.includes(m)));
const packagesIn = (modules: string[]) => modules.filter((url) => url.includes("/node_modules/"));

let srv: TestServer;
let key: string;
before(async () => {
  srv = await startTestServer();
  key = join(dir, "robot.jwk");
  const made = await loaded(["keygen", "--out", key], { PLATFORM_DATA_DIR: join(dir, "unused") });
  assert.equal(made.code, 0, made.stderr);
});
after(async () => {
  await srv?.close();
});

for (const args of [["--version"], ["--help"]]) {
  test(`${args.join(" ")} loads the dispatcher and no package`, async () => {
    const run = await loaded(args, {});
    assert.equal(run.code, 0, run.stderr);
    assert.ok(run.modules.includes(`${DIST}/cli/index.js`), "the hook saw the command line load");
    assert.deepEqual(packagesIn(run.modules), []);
    assert.deepEqual(serverModulesIn(run.modules), []);
  });
}

test("keygen, sign-jwt, admin-token and serve --help do not load the server", async () => {
  const storage = { PLATFORM_DATA_DIR: srv.dataDir, ...(srv.databaseUrl ? { PLATFORM_DATABASE_URL: srv.databaseUrl } : {}) };
  const sign = ["sign-jwt", "--key", key, "--issuer", "https://ci.example", "--subject", "robot", "--audience", "http://localhost:8080"];
  for (const args of [["keygen", "--out", join(dir, "second.jwk")], sign, ["admin-token"], ["serve", "--help"]]) {
    const run = await loaded(args, storage);
    assert.equal(run.code, 0, `${args[0]}: ${run.stderr}`);
    assert.ok(run.modules.length > 0, args[0]);
    assert.deepEqual(serverModulesIn(run.modules), [], args[0]);
  }
});

test("auth token with a valid token stored loads no package, and not the sign-in or the HTTP client", async () => {
  const config = join(dir, "config");
  const expiry = new Date(Date.now() + 3_600_000).toISOString();
  mkdirSync(join(config, "platform-api"), { recursive: true, mode: 0o700 });
  writeFileSync(
    join(config, "platform-api", "credentials.json"),
    JSON.stringify({ version: 1, servers: { "http://localhost:8080": { token: "stored-token", expiry, refreshToken: "prt_x" } } }),
    { mode: 0o600 },
  );
  const run = await loaded(["auth", "token"], { XDG_CONFIG_HOME: config, PLATFORM_URL: "" });
  assert.equal(run.code, 0, run.stderr);
  assert.ok(run.modules.includes(`${DIST}/cli/auth/index.js`), "the hook saw the auth command load");
  assert.ok(run.modules.includes(`${DIST}/cli/auth/credentials.js`), "the hook saw the credentials load, beside the modules it must not");
  assert.deepEqual(packagesIn(run.modules), []);
  assert.deepEqual(serverModulesIn(run.modules), []);
  assert.deepEqual(
    run.modules.filter((url) => /\/cli\/auth\/(server|login|loopback|device|browser)\.js$/.test(url)),
    [],
    "only the credentials are read",
  );
});

test("serve loads the server (the control: the hook sees it when it is loaded)", async () => {
  // 192.0.2.1 (TEST-NET-1) is no address of this machine: serve loads everything, then cannot listen.
  const dataDir = join(dir, "served");
  const run = await loaded(["serve"], { PLATFORM_DATA_DIR: dataDir, HOST: "192.0.2.1", PORT: "0" });
  assert.equal(run.code, 2, run.stderr);
  assert.match(run.stderr, /^platform-api: cannot listen on 192\.0\.2\.1:0: HOST is not an address of this machine \(EADDRNOTAVAIL\)\n$/);
  assert.ok(existsSync(dataDir), "it got as far as the store");
  assert.deepEqual(
    SERVER_MODULES.filter((m) => !run.modules.some((url) => url.includes(m))),
    [],
    "every server module was loaded",
  );
});
