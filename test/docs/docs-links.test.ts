/**
 * Every relative link of README.md and docs/*.md (not docs/deploy/) leads somewhere: to a file or directory that
 * exists and, where it names a #fragment, to a heading of that page as GitHub makes its anchors. A page moved or a
 * heading renamed fails here, naming the page, the line and the link.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { docPages, headingAnchors, links, readPage } from "../support/markdown.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** What is wrong with a relative link of page, or null when it leads somewhere. */
function problem(page: string, target: string): string | null {
  const [path, fragment] = target.split("#", 2) as [string, string | undefined];
  const file = path === "" ? join(ROOT, page) : join(ROOT, dirname(page), decodeURIComponent(path));
  if (!file.startsWith(ROOT)) return "leads outside the repository";
  if (!existsSync(file)) return `${relative(ROOT, file)} does not exist`;
  if (fragment === undefined) return null;
  if (!file.endsWith(".md") || statSync(file).isDirectory()) return "a #fragment on something that is not a markdown page";
  const anchors = headingAnchors(readFileSync(file, "utf8"));
  return anchors.has(fragment) ? null : `${relative(ROOT, file)} has no heading #${fragment}`;
}

test("every relative link of the README and docs/*.md names an existing file, and an existing heading", () => {
  const broken: string[] = [];
  let checked = 0;
  for (const page of docPages()) {
    for (const { line, target } of links(readPage(page))) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: …
      checked++;
      const wrong = problem(page, target);
      if (wrong) broken.push(`${page}:${line}: (${target}): ${wrong}`);
    }
  }
  assert.deepEqual(broken, []);
  assert.ok(checked > 100, `the pages' relative links were found (${checked})`);
});

test("the anchors are GitHub's: markup and punctuation dropped, repeats numbered", () => {
  const anchors = headingAnchors(
    [
      "# Calling the API",
      "## TypeScript (a REST client generated from `/openapi.json`)",
      "## Reconcile: `platform-api registry-reconcile`",
      "```sh",
      "# a comment in a block, not a heading",
      "```",
      "## Limits",
      "### Limits",
      "## [Linked](other.md) heading_with_underscore",
    ].join("\n"),
  );
  assert.deepEqual(
    [...anchors],
    [
      "calling-the-api",
      "typescript-a-rest-client-generated-from-openapijson",
      "reconcile-platform-api-registry-reconcile",
      "limits",
      "limits-1",
      "linked-heading_with_underscore",
    ],
  );
});

test("a link inside code is not a link; a broken one in prose is found", () => {
  const found = links(["See [a](a.md) and `[b](b.md)`.", "```", "[c](c.md)", "```", "![img](d.png)"].join("\n"));
  assert.deepEqual(found, [
    { line: 1, target: "a.md" },
    { line: 5, target: "d.png" },
  ]);
  assert.match(problem("docs/operations.md", "missing.md") ?? "", /docs\/missing\.md does not exist/);
  assert.match(problem("README.md", "docs/operations.md#no-such-heading") ?? "", /has no heading #no-such-heading/);
  assert.equal(problem("README.md", "docs/operations.md#signing-keys"), null);
});
