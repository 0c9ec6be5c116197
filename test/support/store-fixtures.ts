import type {
  AccountAssociationRecord,
  AccountProviders,
  ClaimMatchRecord,
  Cursor,
  GroupFilter,
  GroupInviteRecord,
  GroupOrder,
  GroupRecord,
  IdentityProviderRecord,
  IdentityRecord,
  IdentityRelationship,
  ListQuery,
  OidcSettings,
  RoleBindingRecord,
  RoleRecord,
} from "../../src/store/store.js";

// Records and queries shared by the store conformance suite. Everything here
// speaks the Store interface's types only, never an implementation's.

// Hand-built uids for the hierarchy tests. B shares all but the last character
// with A, and A3 all but the last character with A1, so a bare string-prefix
// test would wrongly count them as descendants.
export const A = "a".repeat(40);
export const B = `${"a".repeat(39)}b`;
export const C = "c".repeat(40);
export const A1 = `${A}/${"1".repeat(16)}`;
export const A1X = `${A1}/${"a".repeat(16)}`;
export const A2 = `${A}/${"2".repeat(16)}`;
export const A2X = `${A2}/${"b".repeat(16)}`;
export const A3 = `${A}/${"1".repeat(15)}2`;
export const A3X = `${A3}/${"c".repeat(16)}`;
export const B1 = `${B}/${"1".repeat(16)}`;

export function hierarchyFixture(): GroupRecord[] {
  return [
    group(A, null, "org"),
    group(A1, A, "team"),
    group(A1X, A1, "svc"),
    group(A2, A, "team"),
    group(A2X, A2, "svc"),
    group(A3, A, "svc"),
    group(A3X, A3, "leaf"),
    group(B, null, "org"),
    group(B1, B, "team"),
    group(C, null, "other org"),
  ];
}

export function group(uid: string, parentUid: string | null, name: string, over: Partial<GroupRecord> = {}): GroupRecord {
  return {
    uid,
    parentUid,
    name,
    description: "",
    verified: false,
    resourceLimits: {},
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

/** claimMatch fields using every field: patterns, claims maps, and text that needs escaping. */
export const CLAIM_MATCH_FIELDS: ClaimMatchRecord = {
  issuer: "https://token.actions.githubusercontent.com",
  issuerPattern: "",
  subject: "",
  subjectPattern: "repo:acme/.*:ref:refs/heads/main",
  audience: "platform",
  audiencePattern: "",
  claims: { repository_owner: "acme", "späce key": 'quoted "value"' },
  claimPatterns: { workflow_ref: "acme/.*/\\.github/workflows/release\\.yml@.*" },
};

export const CLAIM_MATCH: IdentityRelationship = { kind: "claimMatch", claimMatch: CLAIM_MATCH_FIELDS };

/** A staticKeys relationship with a JWKS document, an expiry and several audiences. */
export const STATIC_KEYS: IdentityRelationship = {
  kind: "staticKeys",
  staticKeys: {
    issuer: "https://ci.internal.example",
    subject: "deployer",
    issuerKeys: JSON.stringify({
      keys: [{ kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", kid: "k1" }],
    }),
    expirationTime: 1_800_000_000_123,
    audiences: ["platform", "registry"],
  },
};

export function identity(uid: string, parentUid: string | null, name: string, over: Partial<IdentityRecord> = {}): IdentityRecord {
  return {
    uid,
    parentUid,
    name,
    description: "",
    email: "",
    emailUnverified: "",
    company: "",
    relationship: CLAIM_MATCH,
    lastSeenTime: 0,
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

export function role(
  uid: string,
  parentUid: string | null,
  name: string,
  capabilities: number[] = [1, 2],
  over: Partial<RoleRecord> = {},
): RoleRecord {
  return {
    uid,
    parentUid,
    name,
    description: "",
    capabilities,
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

export function binding(
  uid: string,
  groupUid: string,
  identityUid: string,
  roleUid: string,
  createTime = 1_700_000_000_000,
): RoleBindingRecord {
  return { uid, groupUid, identityUid, roleUid, createTime };
}

/** OIDC settings using every field, a client secret and text that needs escaping included. */
export const OIDC: OidcSettings = {
  issuer: "https://login.example.com/tenant/v2.0",
  clientId: "client-1234",
  clientSecret: 's3cr3t "quoted" \\ späce',
  additionalScopes: ["email", "profile", "groups"],
  groupsClaim: "roles",
  correlationRule: 2,
  pkceEnabled: true,
};

export function identityProvider(
  uid: string,
  parentUid: string,
  name: string,
  defaultRole: string,
  over: Partial<IdentityProviderRecord> = {},
): IdentityProviderRecord {
  return {
    uid,
    parentUid,
    name,
    description: "",
    defaultRole,
    oidc: OIDC,
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

/** Every provider kind, with maps, int64-as-string keys and text that needs escaping. */
export const PROVIDERS: AccountProviders = {
  amazon: { account: "123456789012" },
  google: { projectId: "acme-prod", projectNumber: "987654321098" },
  chainguard: { serviceBindings: { INGESTER: "f".repeat(40), 'späce "key"': "e".repeat(40) } },
  azure: { tenantId: "00000000-1111-2222-3333-444444444444", clientIds: { ingester: "abc", reader: "def" } },
  github: {
    appInstallations: {
      "9007199254740993": {
        installations: [
          { installationId: "18446744073709551615", name: "acme" },
          { installationId: "7", name: "" },
        ],
      },
      "42": { installations: [] },
    },
  },
};

export function association(uid: string, name: string, over: Partial<AccountAssociationRecord> = {}): AccountAssociationRecord {
  return {
    uid,
    name,
    description: "",
    providers: { amazon: { account: "123456789012" } },
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

export function invite(
  uid: string,
  groupUid: string,
  roleUid: string,
  keyId: string,
  over: Partial<GroupInviteRecord> = {},
): GroupInviteRecord {
  return {
    uid,
    groupUid,
    roleUid,
    email: "",
    expirationTime: 1_700_086_400_000,
    singleUse: false,
    keyId,
    codeHash: "0".repeat(64),
    createTime: 1_700_000_000_000,
    ...over,
  };
}

/** A list query with defaults: no filters, uid order, first page of up to 1000, no narrowing. */
export function query<F = GroupFilter, O extends string = GroupOrder>(q: Partial<ListQuery<F, O>>): ListQuery<F, O> {
  return {
    hierarchy: {},
    filter: {} as F,
    order: { field: "uid" as O, desc: false },
    after: null,
    offset: 0,
    limit: 1_000,
    visibleWithin: null,
    ...q,
  };
}

/**
 * What a list can order by: uid always (and "group", an account association's
 * uid); name and times where the kind has them (a tag has no create time).
 */
export interface Orderable {
  uid: string;
  name?: string;
  createTime?: number;
  updateTime?: number;
  expirationTime?: number;
}

/** The keyset position of a record, as the services build it. */
export function cursorOf(r: Orderable, field: string): Cursor {
  const key =
    field === "name"
      ? r.name!
      : field === "created_at"
        ? r.createTime!
        : field === "updated_at"
          ? r.updateTime!
          : field === "expiration_time"
            ? r.expirationTime!
            : r.uid;
  return { key, uid: r.uid };
}

export function sorted(uids: string[]): string[] {
  return [...uids].sort(compareText);
}

export function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The order a store must produce: the field, ties by uid; desc reverses the whole order. */
export function expectedOrder<T extends Orderable>(records: readonly T[], field: string, desc: boolean): T[] {
  const asc = [...records].sort((x, y) => {
    const kx = cursorOf(x, field).key;
    const ky = cursorOf(y, field).key;
    const byKey = typeof kx === "number" && typeof ky === "number" ? kx - ky : compareText(String(kx), String(ky));
    return byKey !== 0 ? byKey : compareText(x.uid, y.uid);
  });
  return desc ? asc.reverse() : asc;
}

/** Deterministic hex segments, so the tie-breaking uid order differs from insertion order. */
export function* hexSegments(seed: number, length: number): Generator<string> {
  let x = seed;
  for (;;) {
    let out = "";
    while (out.length < length) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      out += (x >>> 8).toString(16).padStart(6, "0");
    }
    yield out.slice(0, length);
  }
}
