#include <gtest/gtest.h>

#include "models/gpu_catalog.h"

TEST(GpuCatalog, BundledParses) { EXPECT_GT(hetsim::models::GpuCatalog::Bundled().gpus().size(), 20u); }
