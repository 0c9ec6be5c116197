/**
 * The command line's credentials file (src/cli/auth/credentials.ts): under $XDG_CONFIG_HOME (an absolute one),
 * else ~/.config; a 0700 directory and a 0600 file; one profile per server URL, each kept when another
 * changes; replaced by rename (a reader holding the old file reads it whole), with no temporary file left
 * behind; a file others may read, or one this command did not write, is refused in words; and changes under
 * the lock are serialized, a lock left by a process that is gone being broken.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import {
  credentialsPath,
  readCredentials,
  withCredentialsLock,
  writeCredentials,
  type ServerCredentials,
} from "../../src/cli/auth/credentials.js";
import { AuthCommandError } from "../../src/cli/auth/error.js";

const root = mkdtempSync(join(tmpdir(), "platform-credentials-"));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
/** A credentials path in a fresh config directory that does not exist yet. */
const freshPath = () => credentialsPath({ XDG_CONFIG_HOME: join(root, `config-${++dirs}`) });

const credentials = (n: number): ServerCredentials => ({
  token: `token-${n}`,
  expiry: new Date(Date.UTC(2030, 0, 1, 0, n)).toISOString(),
  refreshToken: `prt_refresh-${n}`,
});

test("the file is $XDG_CONFIG_HOME/platform-api/credentials.json when that is absolute, else ~/.config", () => {
  assert.equal(credentialsPath({ XDG_CONFIG_HOME: "/x/config" }), "/x/config/platform-api/credentials.json");
  assert.equal(credentialsPath({ XDG_CONFIG_HOME: "relative/config" }), join(homedir(), ".config/platform-api/credentials.json"));
  assert.equal(credentialsPath({}), join(homedir(), ".config/platform-api/credentials.json"));
});

test("no file: no credentials; written: a 0600 file in a 0700 directory, read back per server", () => {
  const path = freshPath();
  assert.deepEqual(readCredentials(path), {});
  writeCredentials(path, { "https://a.example": credentials(1), "http://localhost:8080": credentials(2) });
  assert.equal(statSync(path).mode & 0o777, 0o600);
  assert.equal(statSync(join(path, "..")).mode & 0o777, 0o700);
  assert.deepEqual(readCredentials(path), { "https://a.example": credentials(1), "http://localhost:8080": credentials(2) });
  assert.deepEqual(JSON.parse(readFileSync(path, "utf8")).version, 1);
});

test("changing one server's profile keeps the others", async () => {
  const path = freshPath();
  writeCredentials(path, { "https://a.example": credentials(1), "https://b.example": credentials(2) });
  await withCredentialsLock(path, async () => {
    const all = readCredentials(path);
    all["https://a.example"] = credentials(3);
    delete all["https://c.example"];
    writeCredentials(path, all);
  });
  assert.deepEqual(readCredentials(path), { "https://a.example": credentials(3), "https://b.example": credentials(2) });
});

test("a write replaces the file by rename: a reader of the old file reads it whole, and no temporary file is left", () => {
  const path = freshPath();
  writeCredentials(path, { "https://a.example": credentials(1) });
  const before = statSync(path).ino;
  // A second name for the old file, as a reader that opened it before the write holds it.
  const held = `${path}.held`;
  linkSync(path, held);
  writeCredentials(path, { "https://a.example": credentials(2), "https://b.example": credentials(3) });
  assert.notEqual(statSync(path).ino, before, "a new file, not the old one rewritten in place");
  assert.equal(JSON.parse(readFileSync(held, "utf8")).servers["https://a.example"].token, "token-1");
  rmSync(held);
  assert.deepEqual(readdirSync(join(path, "..")), ["credentials.json"]);
});

test("a write that cannot replace the file fails in words and leaves no temporary file", () => {
  const path = freshPath();
  // A non-empty directory where the file should be: the rename fails.
  mkdirSync(join(path, "in-the-way"), { recursive: true });
  assert.throws(
    () => writeCredentials(path, { "https://a.example": credentials(1) }),
    (err: Error) => err instanceof AuthCommandError && err.message.startsWith(`cannot write ${path}: `),
  );
  assert.deepEqual(readdirSync(join(path, "..")), ["credentials.json"]);
});

for (const mode of [0o640, 0o604, 0o660, 0o644]) {
  test(`a file of mode ${mode.toString(8)} (others may read it) is refused, saying so`, () => {
    const path = freshPath();
    writeCredentials(path, { "https://a.example": credentials(1) });
    chmodSync(path, mode);
    assert.throws(
      () => readCredentials(path),
      (err: Error) =>
        err instanceof AuthCommandError &&
        err.message.includes(`${path} has mode 0${mode.toString(8)}: others may read it`) &&
        err.message.includes(`chmod 600 ${path}`),
    );
  });
}

test("a file this command did not write is refused, saying what is wrong with it", () => {
  const cases: [string, RegExp][] = [
    ["{not json", /not JSON/],
    ['{"version": 2, "servers": {}}', /version 2, expected 1/],
    ['{"version": 1}', /no servers object/],
    [
      '{"version": 1, "servers": {"https://a.example": {"token": "t"}}}',
      /the entry of https:\/\/a\.example lacks token, expiry or refreshToken/,
    ],
  ];
  for (const [text, reason] of cases) {
    const path = freshPath();
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, text, { mode: 0o600 });
    assert.throws(
      () => readCredentials(path),
      (err: Error) =>
        err instanceof AuthCommandError && err.message.includes("is not a credentials file of this command") && reason.test(err.message),
      text,
    );
  }
});

test("changes under the lock are serialized: concurrent read-modify-writes lose none", async () => {
  const path = freshPath();
  writeCredentials(path, {});
  const bump = (n: number) =>
    withCredentialsLock(path, async () => {
      const all = readCredentials(path);
      // A pause between read and write, where an unlocked writer would interleave.
      await new Promise((resolve) => setImmediate(resolve));
      all[`https://s${n}.example`] = credentials(n);
      writeCredentials(path, all);
    });
  await Promise.all(Array.from({ length: 12 }, (_, n) => bump(n)));
  assert.equal(Object.keys(readCredentials(path)).length, 12);
  assert.deepEqual(
    readdirSync(join(path, "..")).filter((f) => f !== "credentials.json"),
    [],
    "the lock file is gone",
  );
});

test("a second change waits for the first to release the lock", async () => {
  const path = freshPath();
  const order: string[] = [];
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let entered!: () => void;
  const firstIn = new Promise<void>((resolve) => (entered = resolve));
  const first = withCredentialsLock(path, async () => {
    order.push("first in");
    entered();
    await held;
    order.push("first out");
  });
  await firstIn;
  const second = withCredentialsLock(path, async () => {
    order.push("second in");
  });
  // Let the second try (and fail) to take the lock a few times before the first lets go.
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
  release();
  await Promise.all([first, second]);
  assert.deepEqual(order, ["first in", "first out", "second in"]);
});

test("a lock left by a process that has exited is broken", async () => {
  const path = freshPath();
  mkdirSync(join(path, ".."), { recursive: true });
  const gone = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" });
  writeFileSync(`${path}.lock`, `${gone.stdout} 0123456789abcdef\n`, { mode: 0o600 });
  const result = await withCredentialsLock(path, async () => "ran");
  assert.equal(result, "ran");
  assert.deepEqual(readdirSync(join(path, "..")), [], "the stale lock, and ours, are gone");
});
