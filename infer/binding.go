package infer

// Binding returns how the engine feeds its model: the image input's name,
// shape and type, the constant inputs and the outputs (for tools that run
// the same model another way, such as INT8 calibration).
func (e *Engine) Binding() Binding { return e.bind }
