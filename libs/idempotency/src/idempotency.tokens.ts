/** Injection token of the resolved module-wide settings (`ResolvedModuleSettings`). */
export const IDEMPOTENCY_SETTINGS = 'IDEMPOTENCY_SETTINGS';
