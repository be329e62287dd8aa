"""Model plumbing: offline assets, calibration/evaluation text, Hessians, compressed models."""
