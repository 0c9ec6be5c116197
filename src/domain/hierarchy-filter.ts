/** Hierarchy narrowing shared by every List (the UIDPFilter). Set fields combine with AND. */
export interface HierarchyFilter {
  /** Records whose uid is a proper ancestor of this uid. */
  ancestorsOf?: string;
  /** Records whose uid lies strictly below this uid. */
  descendantsOf?: string;
  /** Records exactly one level below this uid. */
  childrenOf?: string;
  /** Only root-level records. */
  inRoot?: boolean;
  /** Exactly these uids. */
  ids?: readonly string[];
}
