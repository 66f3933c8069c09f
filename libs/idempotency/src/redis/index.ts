export const REDIS = 'redis';
