import { randomBytes } from "node:crypto";

const UIDP = /^[0-9a-f]{40}(?:\/[0-9a-f]{16})*$/;

/** True when s is a well-formed uid path (root of 40 hex, then "/" + 16 hex per level). */
export function isUidp(s: string): boolean {
  return s.length <= 4096 && UIDP.test(s);
}

/** A fresh root uid: 20 random bytes as lowercase hex. */
export function newRootUid(): string {
  return randomBytes(20).toString("hex");
}

/** A fresh child uid directly below parent. */
export function newChildUid(parent: string): string {
  return `${parent}/${randomBytes(8).toString("hex")}`;
}

/** The parent uid, or null for a root. */
export function parentOf(uid: string): string | null {
  const i = uid.lastIndexOf("/");
  return i < 0 ? null : uid.slice(0, i);
}

/** The root segment of a uid path. */
export function rootOf(uid: string): string {
  const i = uid.indexOf("/");
  return i < 0 ? uid : uid.slice(0, i);
}

/**
 * True when ancestor is a proper ancestor of uid. Ancestry is by whole path
 * segments: "ab" is not an ancestor of "abc/…".
 */
export function isAncestor(ancestor: string, uid: string): boolean {
  return uid.length > ancestor.length + 1 && uid.startsWith(ancestor) && uid[ancestor.length] === "/";
}

/** True when uid is scope itself or lies below it. */
export function isAtOrBelow(scope: string, uid: string): boolean {
  return uid === scope || isAncestor(scope, uid);
}

/** Every proper ancestor of uid, nearest first. */
export function ancestorsOf(uid: string): string[] {
  const out: string[] = [];
  for (let p = parentOf(uid); p !== null; p = parentOf(p)) out.push(p);
  return out;
}
