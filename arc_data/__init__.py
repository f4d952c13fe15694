"""ARC data: sources, augmentation, the arc-aug builder, its manifest, and the training reader."""
