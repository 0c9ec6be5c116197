/**
 * Fetch capacity shared fairly. Any org owner decides which issuers the
 * server fetches (an identity's issuerPattern, a provider's issuer), so a
 * host that never answers must cost only its tenant's share: a tenant holds
 * at most `perTenant` fetches at once, and `reserved` of the `max` slots are
 * kept for priority fetches (the operator's issuers and issuers that have
 * answered before), which never-seen issuers cannot take.
 */

/** How fetch capacity is divided. */
export interface FetchSlotLimits {
  /** Fetches in flight at most, over every tenant and issuer. */
  max: number;
  /** Of max, slots only priority fetches may use. */
  reserved: number;
  /** Fetches in flight at most for one tenant (priority fetches included). */
  perTenant: number;
}

/** What asks for a slot. */
export interface SlotRequest {
  /** Who decided this issuer is fetched (an organization), or undefined when no tenant did (the operator's issuers). */
  tenant: string | undefined;
  /** An operator issuer or one that answered before: may use reserved slots. */
  priority: boolean;
}

/** Defaults: the 16 fetches the verifier always allowed, half of them kept for known issuers, two per tenant. */
export const DEFAULT_FETCH_SLOT_LIMITS: FetchSlotLimits = { max: 16, reserved: 8, perTenant: 2 };

/** Counts fetches in flight by pool and by tenant; holds nothing else (at most `max` tenants are counted at once). */
export class FetchSlots {
  private priority = 0;
  private general = 0;
  private readonly byTenant = new Map<string, number>();

  constructor(private readonly limits: FetchSlotLimits = DEFAULT_FETCH_SLOT_LIMITS) {}

  /** Fetches in flight now, for tests and metrics. */
  get inFlight(): number {
    return this.priority + this.general;
  }

  /**
   * Takes a slot and returns its release (idempotent), or undefined when the
   * request's tenant or pool is full: the caller answers at once rather than
   * queueing, so a slow host never makes anyone else wait.
   */
  tryAcquire(req: SlotRequest): (() => void) | undefined {
    const { max, reserved, perTenant } = this.limits;
    if (this.priority + this.general >= max) return undefined;
    if (!req.priority && this.general >= max - reserved) return undefined;
    const held = req.tenant === undefined ? 0 : (this.byTenant.get(req.tenant) ?? 0);
    if (req.tenant !== undefined && held >= perTenant) return undefined;
    if (req.priority) this.priority++;
    else this.general++;
    if (req.tenant !== undefined) this.byTenant.set(req.tenant, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (req.priority) this.priority--;
      else this.general--;
      if (req.tenant === undefined) return;
      const left = (this.byTenant.get(req.tenant) ?? 1) - 1;
      if (left === 0) this.byTenant.delete(req.tenant);
      else this.byTenant.set(req.tenant, left);
    };
  }
}
