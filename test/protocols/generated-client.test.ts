/**
 * A REST client generated from the live /openapi.json the way users make one
 * (openapi-typescript for the types, openapi-fetch for the calls), checked by
 * tsc without skipLibCheck or casts, then run against the server: it reaches
 * a grandchild group and a tag below it, although openapi-fetch
 * percent-encodes the slashes of their uids. And the README's example project
 * (examples/typescript), run as the README says in a copy of the checkout:
 * it works, and leaves the checkout as git has it.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { scratchCheckout } from "../support/scratch-checkout.js";
import { startTestServer, type TestServer } from "../support/server.js";

const run = promisify(execFile);
const ROOT = new URL("../..", import.meta.url).pathname;
const bin = (name: string) => join(ROOT, "node_modules", ".bin", name);

/** The user's program: only the generated types and openapi-fetch. */
const PROGRAM = `
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type Status = components["schemas"]["google.rpc.Status"];

const client = createClient<paths>({
  baseUrl: process.env.API_URL ?? "",
  headers: { authorization: \`Bearer \${process.env.API_TOKEN ?? ""}\` },
});

/** The data of a successful call, or an Error with the error body. */
function must<T>(result: { data?: T; error?: unknown; response: Response }, what: string): T {
  if (result.data === undefined) throw new Error(\`\${what}: \${result.response.status} \${JSON.stringify(result.error)}\`);
  return result.data;
}

/** The ErrorInfo reason of an error body: the detail whose @type says so. */
function reasonOf(error: Status | undefined): string {
  for (const detail of error?.details ?? []) {
    if (detail["@type"] === "type.googleapis.com/google.rpc.ErrorInfo") return detail.reason;
  }
  return "";
}

const org = must(await client.POST("/iam/v2beta1/groups", { body: { name: "generated org" } }), "create org");
const child = must(await client.POST("/iam/v2beta1/groups/{uid}", { params: { path: { uid: org.uid } }, body: { name: "generated child" } }), "create child");
const grandchild = must(
  await client.POST("/iam/v2beta1/groups/{uid}", { params: { path: { uid: child.uid } }, body: { name: "generated grandchild", description: "three levels" } }),
  "create grandchild",
);
const got = must(await client.GET("/iam/v2beta1/groups/{uid}", { params: { path: { uid: grandchild.uid } } }), "get grandchild");
const listed = must(await client.GET("/iam/v2beta1/groups", { params: { query: { "uidp.children_of": child.uid } } }), "list children");
const updated = must(
  await client.PATCH("/iam/v2beta1/groups/{uid}", { params: { path: { uid: grandchild.uid } }, body: { description: "patched" } }),
  "update grandchild",
);

const repo = must(await client.POST("/registry/v2beta1/repos/{uid}", { params: { path: { uid: grandchild.uid } }, body: { name: "generated/repo" } }), "create repo");
const digest = (c: string) => \`sha256:\${c.repeat(64)}\`;
const tag = must(await client.POST("/registry/v2beta1/tags/{uid}", { params: { path: { uid: repo.uid } }, body: { name: "latest", digest: digest("a") } }), "create tag");
const gotTag = must(await client.GET("/registry/v2beta1/tags/{uid}", { params: { path: { uid: tag.uid } } }), "get tag");
const tags = must(await client.GET("/registry/v2beta1/tags", { params: { query: { "uidp.children_of": repo.uid } } }), "list tags");
// Tags have no Update: CreateTag with the name of an existing tag updates it.
const retagged = must(await client.POST("/registry/v2beta1/tags/{uid}", { params: { path: { uid: repo.uid } }, body: { name: "latest", digest: digest("b") } }), "update tag");
must(await client.DELETE("/registry/v2beta1/tags/{uid}", { params: { path: { uid: tag.uid } } }), "delete tag");
const tagAfter = await client.GET("/registry/v2beta1/tags/{uid}", { params: { path: { uid: tag.uid } } });
must(await client.DELETE("/registry/v2beta1/repos/{uid}", { params: { path: { uid: repo.uid } } }), "delete repo");
must(await client.DELETE("/iam/v2beta1/groups/{uid}", { params: { path: { uid: grandchild.uid } } }), "delete grandchild");
const groupAfter = await client.GET("/iam/v2beta1/groups/{uid}", { params: { path: { uid: grandchild.uid } } });

console.log(
  JSON.stringify({
    uids: { org: org.uid, child: child.uid, grandchild: grandchild.uid, repo: repo.uid, tag: tag.uid },
    got: { uid: got.uid, name: got.name, description: got.description },
    listed: listed.groups.map((g) => g.uid),
    updated: { name: updated.name, description: updated.description },
    tag: { uid: gotTag.uid, digest: gotTag.digest, listed: tags.tags.map((t) => t.uid), retagged: { uid: retagged.uid, digest: retagged.digest } },
    tagAfter: { status: tagAfter.response.status, reason: reasonOf(tagAfter.error) },
    groupAfter: { status: groupAfter.response.status, reason: reasonOf(groupAfter.error) },
  }),
);
`;

const TSCONFIG = {
  compilerOptions: {
    target: "ES2022",
    module: "NodeNext",
    moduleResolution: "NodeNext",
    strict: true,
    noEmit: true,
    types: ["node"],
  },
  files: ["client.ts"],
};

let srv: TestServer;
let dir: string;
before(async () => {
  srv = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), "generated-client-"));
  // The program resolves openapi-fetch, tsx and @types/node as a user's project would.
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
});
after(async () => {
  await srv.close();
  rmSync(dir, { recursive: true, force: true });
});

test("openapi-typescript + openapi-fetch: the client type-checks and does Create/Get/List/Update/Delete on a grandchild group and a tag", async () => {
  const spec = await fetch(`${srv.url}/openapi.json`);
  assert.equal(spec.status, 200);
  writeFileSync(join(dir, "openapi.json"), await spec.text());
  await run(bin("openapi-typescript"), ["openapi.json", "--output", "schema.d.ts"], { cwd: dir });
  writeFileSync(join(dir, "client.ts"), PROGRAM);
  writeFileSync(join(dir, "tsconfig.json"), JSON.stringify(TSCONFIG));
  const typecheck = await run(bin("tsc"), ["-p", "tsconfig.json"], { cwd: dir }).catch((err: { stdout?: string }) => ({
    stdout: `tsc failed:\n${err.stdout ?? ""}`,
  }));
  assert.equal(typecheck.stdout, "", "the generated client type-checks");

  const { stdout } = await run(process.execPath, ["--import", "tsx", "client.ts"], {
    cwd: dir,
    env: { ...process.env, API_URL: srv.url, API_TOKEN: srv.adminToken },
  });
  const out = JSON.parse(stdout);
  const { org, child, grandchild, repo, tag } = out.uids;
  assert.match(grandchild, new RegExp(`^${child}/[0-9a-f]{16}$`));
  assert.match(child, new RegExp(`^${org}/[0-9a-f]{16}$`));
  assert.deepEqual(out.got, { uid: grandchild, name: "generated grandchild", description: "three levels" });
  assert.deepEqual(out.listed, [grandchild]);
  assert.deepEqual(out.updated, { name: "generated grandchild", description: "patched" });
  assert.match(repo, new RegExp(`^${grandchild}/[0-9a-f]{16}$`));
  assert.match(tag, new RegExp(`^${repo}/[0-9a-f]{16}$`));
  assert.deepEqual(out.tag, {
    uid: tag,
    digest: `sha256:${"a".repeat(64)}`,
    listed: [tag],
    retagged: { uid: tag, digest: `sha256:${"b".repeat(64)}` },
  });
  assert.deepEqual(out.tagAfter, { status: 404, reason: "NOT_FOUND" });
  assert.deepEqual(out.groupAfter, { status: 404, reason: "NOT_FOUND" });
});

/**
 * The README's commands for examples/typescript after `npm install` (which the test does not run: it needs the
 * registry; the checkout's node_modules stands in, with the same versions): everything they write stays in
 * examples/typescript, which its .gitignore keeps out of git status.
 */
const TS_EXAMPLE = [
  "cd examples/typescript",
  "npx openapi-typescript http://localhost:8080/openapi.json -o platform-api.d.ts",
  "npx tsx client.ts",
  "npx tsc",
];

test("examples/typescript: pins the versions this repository tests with", () => {
  type Manifest = { dependencies?: Record<string, string>; devDependencies?: Record<string, string> };
  const read = (path: string) => JSON.parse(readFileSync(join(ROOT, path), "utf8")) as Manifest;
  const ours = read("package.json");
  const example = read("examples/typescript/package.json");
  const pinned = { ...ours.dependencies, ...ours.devDependencies };
  for (const [name, version] of Object.entries({ ...example.dependencies, ...example.devDependencies })) {
    assert.equal(version, pinned[name], `${name} in examples/typescript/package.json`);
  }
});

test("examples/typescript, run as the README says: it creates, updates and lists groups, and leaves the checkout clean", async () => {
  const scratch = scratchCheckout(["examples/typescript"]);
  try {
    const example = join(scratch.root, "examples", "typescript");
    symlinkSync(join(ROOT, "node_modules"), join(example, "node_modules"));
    // npm's own cache (~/.npm, its logs) is npm's, not the example's: a temporary one here.
    const env = {
      ...scratch.env,
      npm_config_cache: join(scratch.env.TMPDIR!, "npm-cache"),
      npm_config_update_notifier: "false",
      TOKEN: srv.adminToken,
      PLATFORM_URL: srv.url,
    };
    const outputs: string[] = [];
    for (const command of TS_EXAMPLE.slice(1)) {
      const script = `${TS_EXAMPLE[0]} && ${command.replaceAll("localhost:8080", `127.0.0.1:${srv.port}`)}`;
      outputs.push((await run("bash", ["-c", script], { cwd: scratch.root, env })).stdout);
    }
    const [, printed, typecheck] = outputs;
    const listed = JSON.parse(printed!) as { groups: { name: string; description: string }[] };
    assert.deepEqual(
      listed.groups.map((g) => ({ name: g.name, description: g.description })),
      [{ name: "eng", description: "the team" }],
    );
    assert.equal(typecheck, "", "tsc finds nothing");
    assert.equal(scratch.status(), "", "git status --porcelain");
    assert.deepEqual(scratch.writtenOutside(), []);
  } finally {
    scratch.remove();
  }
});

test("the docs give the commands this test runs (README.md or a page of docs/)", () => {
  const pages = [
    "README.md",
    ...readdirSync(join(ROOT, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => join("docs", f)),
  ];
  const giving = pages.filter((page) => {
    const text = readFileSync(join(ROOT, page), "utf8");
    return TS_EXAMPLE.every((command) => text.includes(`\n${command}`));
  });
  assert.notDeepEqual(giving, [], `a page runs, line for line:\n${TS_EXAMPLE.join("\n")}`);
});
