/** Match the claims of a third-party OIDC token. Empty strings mean "not set". */
export interface ClaimMatchRecord {
  issuer: string;
  issuerPattern: string;
  subject: string;
  subjectPattern: string;
  audience: string;
  audiencePattern: string;
  claims: Record<string, string>;
  claimPatterns: Record<string, string>;
}
