// Types of build-commit.mjs, for the tests that call it (test/cli/cli-version.test.ts).

/** What the build compiles or ships next to dist/: a difference from the commit in any of them makes it "-dirty". */
export declare const BUILD_SOURCES: readonly string[];

/**
 * The commit of the checkout at root ("1339023", "1339023-dirty"), PLATFORM_BUILD_COMMIT when set, null when
 * neither tells. Throws on a PLATFORM_BUILD_COMMIT that is no commit.
 */
export declare function buildCommit(root: string, env?: Record<string, string | undefined>): string | null;
