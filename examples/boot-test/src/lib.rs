//! Host-side helpers to build and boot the example kernel (work in progress).
