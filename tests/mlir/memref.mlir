// memref globals, alloca scopes and hints (prefetch, assume_alignment), as mlir-opt-22 prints them.
// tests/test_memref_globals.py runs them on the interpreter and compiled.

memref.global "private" constant @weights : memref<2x2xf32> = dense<[[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> {alignment = 64 : i64}
memref.global @hits : memref<i64> = uninitialized
memref.global "private" @zeros : memref<3xi32>

func.func @lookup(%arg0: index, %arg1: index) -> f32 {
  %0 = memref.get_global @weights : memref<2x2xf32>
  memref.prefetch %0[%arg0, %arg1], read, locality<3>, data : memref<2x2xf32>
  %1 = memref.load %0[%arg0, %arg1] : memref<2x2xf32>
  return %1 : f32
}

func.func @scoped(%arg0: index, %arg1: memref<8xf32>) -> f32 {
  %assume_align = memref.assume_alignment %arg1, 4 : memref<8xf32>
  %0 = memref.alloca_scope  -> (f32) {
    %alloca = memref.alloca(%arg0) : memref<?xf32>
    %c0 = arith.constant 0 : index
    %1 = memref.load %assume_align[%c0] : memref<8xf32>
    memref.store %1, %alloca[%c0] : memref<?xf32>
    memref.prefetch %alloca[%c0], write, locality<0>, instr : memref<?xf32>
    %2 = memref.load %alloca[%c0] : memref<?xf32>
    memref.alloca_scope.return %2 : f32
  }
  memref.alloca_scope  {
    %1 = memref.get_global @hits : memref<i64>
    %2 = memref.load %1[] : memref<i64>
    %c1_i64 = arith.constant 1 : i64
    %3 = arith.addi %2, %c1_i64 : i64
    memref.store %3, %1[] : memref<i64>
  }
  return %0 : f32
}
